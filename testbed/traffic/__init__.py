"""Training traffic: plans from collectives, pipelines and traces, the RoCEv2 frames and the
transport's parameters, and the engine with its compiled NIC data plane."""
