"""`env-server COMMAND [--flags]`: a built-in environment over HTTP (see `env-server --help`).

`write` and `serve` make and run a NeMo Gym resources server, `openenv` serves OpenEnv environments (and `write URL
OUT` writes the NeMo Gym folder from such a server); older argparse spellings keep working
(`env-server write gridsim OUT --data-dir D`, `env-server serve DIR --port 9100 --masked-as-error`).
"""

from __future__ import annotations

from prime_rl.cli.command import Command, Group

_ERRORS = (FileNotFoundError, ValueError, KeyError)  # a missing folder, a malformed config, an unknown environment
_SERVE_ERRORS = _ERRORS + ("prime_rl.ports:PortInUseError",)  # a taken port (names its holder)

main = Group("env-server", "a built-in environment over HTTP: NeMo Gym rows and resources server, OpenEnv server", {
    "write": Command(
        "write", "prime_rl.config.env_server:EnvServerWriteConfig", "prime_rl.envs.nemo_gym.cli:write",
        "write OUT/resources_servers/<env>_v1/ (NeMo Gym config, data/train.jsonl, data/eval.jsonl; gridsim with "
        "--forward-from: data/forward.jsonl too)",
        positional=("env", "out"), user_errors=_ERRORS + (ConnectionError,),
    ),
    "serve": Command(
        "serve", "prime_rl.config.env_server:EnvServerServeConfig", "prime_rl.envs.nemo_gym.cli:serve",
        "serve a written resources server directory over HTTP (NeMo Gym's resources-server protocol)",
        positional=("dir",), user_errors=_SERVE_ERRORS,
    ),
    "openenv": Command(
        "openenv", "prime_rl.config.env_server:EnvServerOpenEnvConfig", "prime_rl.envs.openenv.server:run",
        "serve a built-in environment's tasks as OpenEnv environments (/all, /eval) on openenv-core's server",
        positional=("env",), user_errors=_SERVE_ERRORS,
    ),
})

if __name__ == "__main__":
    main()
