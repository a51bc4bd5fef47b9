"""gpt.serve_ray: a local Ray cluster with 2 engine replicas behind Ray's HTTP proxy spreads
requests over both and answers each as the model's own generate() does."""

import concurrent.futures
import os
import socket
import sys

import httpx
import pytest

import gpt
from gpt.cli import EMBEDDED_MODEL

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(gpt.__file__)))
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/python: the helper modules


def paged_embedded_model():
    """The embedded model; with the numpy paged step while the model has no compiled one."""
    model = gpt.GPT.from_pretrained(EMBEDDED_MODEL)
    if hasattr(model, "step_batch"):
        return model
    sys.path.insert(0, HERE)
    from paged_reference import ReferencePagedModel

    return ReferencePagedModel(model)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    from gpt.serve_ray import application

    # Ray writes its auth token under ~/.ray (Path.home()), and the home of whoever runs the tests
    # may be read-only (it is in Bazel's sandbox): give it, and the processes it starts, a home of
    # its own.
    os.environ["HOME"] = str(tmp_path_factory.mktemp("ray-home"))
    # The replicas are processes that Ray starts: they import gpt (and the reference) from here.
    os.environ["PYTHONPATH"] = os.pathsep.join([PACKAGE_ROOT, HERE, os.environ.get("PYTHONPATH", "")])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(application(model_loader=paged_embedded_model, replicas=2), route_prefix="/")
    yield f"http://127.0.0.1:{port}"
    serve.shutdown()
    ray.shutdown()


def test_two_replicas_share_the_requests_and_answer_correctly(url):
    model = gpt.GPT.from_pretrained(EMBEDDED_MODEL)
    prompts = [list(f"Request {i}: once upon a time".encode()) for i in range(16)]

    def ask(prompt):
        response = httpx.post(
            url + "/v1/completions", json=dict(prompt=prompt, max_tokens=8, temperature=0), timeout=60
        )
        assert response.status_code == 200, response.text
        return response.headers["X-GPT-Instance"], response.json()["choices"][0]["token_ids"]

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(ask, prompts))
    assert len({instance for instance, _ in answers}) == 2, "requests were not spread over both replicas"
    for prompt, (_, tokens) in zip(prompts, answers, strict=True):
        assert tokens == model.generate(prompt, 8)
    assert httpx.get(url + "/health").json() == {"status": "ok"}
