"""The IBM Granite 4 hybrid architecture for pyagent."""
