"""The deployment simulator behind `prime-rl plan`: a discrete-event model of the asynchronous RL pipeline
(`pipeline`), its inference replicas (`replica`), what it predicts (`report`), the capacity table (`capacity`)."""
