"""Ray Serve: N replicas of the engine, each with its own model and KV pool, behind Ray's HTTP
proxy, with the API of `python -m gpt serve` (gpt.server). See docs/SERVING.md.

    python -m gpt.serve_ray --model DIR --replicas 2 --port 8000     # a local Ray cluster
    RAY_ADDRESS=auto python -m gpt.serve_ray --model DIR --replicas 8  # an existing cluster
"""

import argparse
import os
import socket


def load_model(model_path: str | None, context: int | None = None):
    """The model a replica serves: a HF GPT-2 directory, a GGUF file, or (None) the embedded model,
    serving `context` positions (default: the file's, up to gpt.model.DEFAULT_CONTEXT)."""
    from gpt.cli import EMBEDDED_MODEL
    from gpt.model import GPT

    if model_path and model_path.endswith(".gguf"):
        return GPT.from_gguf(model_path, context=context)
    return GPT.from_pretrained(model_path or EMBEDDED_MODEL, context=context)


def application(
    model_loader=None,
    model_path: str | None = None,
    replicas: int = 2,
    engine_options=None,
    replica_cpus: float = 0,
    context: int | None = None,
):
    """A Ray Serve application of `replicas` engine replicas. `model_loader()` makes each replica's
    model (default: load_model(model_path, context)); `engine_options` go to gpt.engine.Engine;
    `replica_cpus` is what Ray reserves per replica (0: place them anywhere, as tests want; on a
    cluster, the cores a replica's model uses, so Ray spreads them over the machines)."""
    from ray import serve

    engine_options = dict(engine_options or {})
    name = os.path.basename(os.path.normpath(model_path)) if model_path else "byte-gpt"

    def build_app():  # runs in each replica's process
        from gpt.engine import Engine
        from gpt.server import create_app

        model = model_loader() if model_loader is not None else load_model(model_path, context)
        instance = f"{socket.gethostname()}:{os.getpid()}"
        model_dir = model_path if model_path and os.path.isdir(model_path) else None  # its chat template
        return create_app(Engine(model, **engine_options), model_name=name, instance=instance, model_dir=model_dir)

    @serve.deployment(num_replicas=replicas, ray_actor_options={"num_cpus": replica_cpus})
    @serve.ingress(build_app)
    class GPTReplica:
        pass

    return GPTReplica.bind()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="HF GPT-2 directory or GGUF file (default: embedded model)")
    parser.add_argument("--ctx", type=int, default=None, help="the model's context (default: the file's, up to 4096)")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--replica_cpus", type=float, default=0, help="cores Ray reserves per replica")
    args = parser.parse_args()

    import ray
    from ray import serve

    ray.init(address=os.environ.get("RAY_ADDRESS"))
    serve.start(http_options={"host": args.host, "port": args.port})
    serve.run(
        application(model_path=args.model, replicas=args.replicas, replica_cpus=args.replica_cpus, context=args.ctx),
        route_prefix="/",
        blocking=True,
    )


if __name__ == "__main__":
    main()
