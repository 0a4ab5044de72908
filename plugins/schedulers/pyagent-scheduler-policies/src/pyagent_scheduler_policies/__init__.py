"""pyagent-scheduler-policies: the waiting-queue orders and preemption victims pyagent ships."""
