"""Runs inside the nemo-gym 0.7.0 peer venv (scripts/peer_venvs.py): serves NeMo Gym's own servers on 127.0.0.1
the way NeMo Gym builds them (`<Server>(config=..., server_client=...).setup_webserver()`, then uvicorn on the
app, as verifiers' launcher does; no Ray, no head server), prints one JSON line with the ports, serves until killed.

    python nemo_serve.py example example_single_tool_call      -> {"port": P}
    python nemo_serve.py example example_session_state_mgmt
    python nemo_serve.py agent --resources-url URL --script S.json -> {"agent": P, "model": Q}

`agent`: NeMo Gym's SimpleAgent (`responses_api_agents/simple_agent`) against the resources server at URL, with a
stub Responses-API model: on each call it answers turn k of the script, k = the number of `function_call_output`
items in its input. A turn is {"call": name, "arguments": {...}} (a function call) or {"text": "..."} (a message).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import time
from urllib.parse import urlparse

import uvicorn
from fastapi import FastAPI, Request
from nemo_gym.config_types import BaseServerConfig
from nemo_gym.server_utils import GlobalAIOHTTPAsyncClientConfig, ServerClient, set_global_aiohttp_client
from omegaconf import OmegaConf

HOST = "127.0.0.1"


def _socket() -> tuple[socket.socket, int]:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((HOST, 0))
    return s, s.getsockname()[1]


def _client(global_config: dict) -> ServerClient:
    return ServerClient(head_server_config=BaseServerConfig(host=HOST, port=1), global_config_dict=OmegaConf.create(global_config))


def example_app(name: str, port: int) -> FastAPI:
    from importlib import import_module

    module = import_module(f"resources_servers.{name}.app")
    cls = next(v for k, v in vars(module).items() if k.endswith("ResourcesServer") and isinstance(v, type)
               and v.__module__ == module.__name__)  # fmt: skip
    config_cls = cls.model_fields["config"].annotation
    server = cls(config=config_cls(name=name, host=HOST, port=port, entrypoint="app.py", domain="agent"),
                 server_client=_client({}))  # fmt: skip
    app = server.setup_webserver()
    server.setup_liveness(app)
    server.setup_exception_middleware(app)
    return app


def stub_model_app(script: list[dict]) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/responses")
    async def responses(request: Request) -> dict:
        body = await request.json()
        items = body["input"] if isinstance(body["input"], list) else []
        k = sum(1 for it in items if isinstance(it, dict) and it.get("type") == "function_call_output")
        turn = script[min(k, len(script) - 1)]
        if "call" in turn:
            out = {"type": "function_call", "id": f"fc_{k}", "call_id": f"call_{k}", "name": turn["call"],
                   "arguments": json.dumps(turn["arguments"]), "status": "completed"}  # fmt: skip
        else:
            out = {"type": "message", "id": f"msg_{k}", "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": turn["text"], "annotations": []}]}  # fmt: skip
        return {"id": f"resp_{k}", "created_at": time.time(), "model": "stub", "object": "response", "output": [out],
                "parallel_tool_calls": True, "tool_choice": "auto", "tools": body.get("tools") or []}  # fmt: skip

    return app


def agent_app(resources_url: str, agent_port: int, model_port: int) -> FastAPI:
    from nemo_gym.config_types import ModelServerRef, ResourcesServerRef
    from responses_api_agents.simple_agent.app import SimpleAgent, SimpleAgentConfig

    u = urlparse(resources_url)
    glob = {
        "resources": {"resources_servers": {"ours": {"host": u.hostname, "port": u.port}}},
        "policy_model": {"responses_api_models": {"stub": {"host": HOST, "port": model_port}}},
        "agent": {"responses_api_agents": {"simple_agent": {"host": HOST, "port": agent_port}}},
    }
    cfg = SimpleAgentConfig(name="agent", host=HOST, port=agent_port, entrypoint="app.py",
                            resources_server=ResourcesServerRef(type="resources_servers", name="resources"),
                            model_server=ModelServerRef(type="responses_api_models", name="policy_model"))  # fmt: skip
    agent = SimpleAgent(config=cfg, server_client=_client(glob))
    app = agent.setup_webserver()
    agent.setup_liveness(app)
    agent.setup_exception_middleware(app)
    return app


async def serve(apps: list[tuple[FastAPI, socket.socket]]) -> None:
    set_global_aiohttp_client(GlobalAIOHTTPAsyncClientConfig())  # inside the loop the agent's requests run on
    servers = [uvicorn.Server(uvicorn.Config(app, log_level="warning")) for app, _ in apps]
    await asyncio.gather(*(srv.serve(sockets=[s]) for srv, (_, s) in zip(servers, apps, strict=True)))


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("example")
    e.add_argument("name")
    a = sub.add_parser("agent")
    a.add_argument("--resources-url", required=True)
    a.add_argument("--script", required=True)
    args = p.parse_args()
    if args.cmd == "example":
        s, port = _socket()
        apps, ports = [(example_app(args.name, port), s)], {"port": port}
    else:
        (sa, pa), (sm, pm) = _socket(), _socket()
        script = json.loads(open(args.script).read())
        apps = [(agent_app(args.resources_url, pa, pm), sa), (stub_model_app(script), sm)]
        ports = {"agent": pa, "model": pm}
    print(json.dumps(ports), flush=True)
    asyncio.run(serve(apps))


if __name__ == "__main__":
    sys.exit(main())
