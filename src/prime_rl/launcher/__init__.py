"""The `rl` launcher: pre-flight checks, starting, health-waiting, supervising and stopping the processes of a run."""
