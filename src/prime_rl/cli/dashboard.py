"""`dashboard RUN_DIR [--port 8765] [--host 127.0.0.1]` (also `prime-rl dashboard ...`): a live web page of a run."""

from __future__ import annotations

from prime_rl.cli.command import Command

main = Command("dashboard", "prime_rl.config.utilities:DashboardConfig", "prime_rl.monitor.dashboard:run",
               "a live web page of a run: steps, panels, eval tables, recent rollouts, process health",
               positional=("run",), user_errors=(FileNotFoundError, "prime_rl.ports:PortInUseError"))  # fmt: skip

if __name__ == "__main__":
    main()
