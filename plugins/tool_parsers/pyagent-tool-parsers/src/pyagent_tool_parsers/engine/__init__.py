"""The streaming engine the parsers are written in: suspending readers, emitters, regions, body formats."""
