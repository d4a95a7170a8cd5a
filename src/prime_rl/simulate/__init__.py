"""The deployment simulator behind `prime-rl plan`: a discrete-event model of the asynchronous RL pipeline
(`pipeline`, on the clock of `events`), its inference replicas (`replica`), what it predicts (`report`), inputs
and measurements read from a finished run (`measure`), the 4B-model capacity table (`capacity`), the command
(`cli`)."""
