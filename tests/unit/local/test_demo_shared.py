"""`make demo SHARED=1` (`--shared`): the two jobs it applies are examples/local.yaml served from the ModelServer of
examples/local-model-server.yaml under one alias, and the server takes them (the pure side of shared serving); its
summary is ok only when every step ran and the client saw no error. (The demo itself is not run here: it needs
the local control plane; tests/e2e/test_shared_serving.py runs the same server example for real.)"""

from __future__ import annotations

import yaml

from mmrl_api import JobStatus, MultimodalRLJob
from mmrl_api.model_server import parse_server
from mmrl_local.demo import THROUGH_KUEUE, job_document
from mmrl_local.demo_shared import ALIAS, SERVER_EXAMPLE, VERSIONS, SharedSummary, shared_job
from mmrl_local.stranger import Attempt
from mmrl_operator.core.jsonmerge import merge_patch
from mmrl_operator.core.names import job_dir
from mmrl_operator.core.shared_serving import Candidate, candidate


def demo_job(name: str, seed: int) -> MultimodalRLJob:
    server = yaml.safe_load(SERVER_EXAMPLE.read_text())["metadata"]["name"]
    doc = job_document(merge_patch(shared_job(name, server, seed), THROUGH_KUEUE))
    doc["metadata"].update(namespace="default", uid=f"{name}-0000-0000-0000-000000000000")
    return MultimodalRLJob.model_validate(doc)


def test_both_versions_are_valid_jobs_on_their_own_samples_that_the_example_server_takes() -> None:
    server = parse_server(yaml.safe_load(SERVER_EXAMPLE.read_text()))
    samples = set()
    for name, seed in VERSIONS:
        job = demo_job(name, seed)
        inf = job.spec.inference
        assert (inf.server, inf.alias, inf.served_model_name) == (server.name, ALIAS, name)
        assert inf.promote_when is not None and inf.promote_when.beats_baseline
        assert job.spec.cluster.kueue is not None
        samples.add(job.spec.dataset.train)
        path = f"{job_dir(job)}/adapter"
        status = JobStatus.model_validate(
            {
                "phase": "Serving",
                "adapter": {
                    "path": path,
                    "rank": job.spec.lora.rank,
                    "alpha": job.spec.lora.alpha,
                    "targetModules": ["q_proj", "v_proj"],
                    "sha256": "ab" * 32,
                    "digest": "cd" * 32,
                    "evaluation": {"heldOutReward": 0.8, "baselineReward": 0.4, "step": 30},
                },
            }
        )
        assert isinstance(candidate(job, status, server), Candidate), name
    assert len(samples) == 2


def test_the_summary_is_ok_only_when_every_step_ran_no_question_failed_and_the_stranger_was_refused() -> None:
    refused = Attempt("unload", "http://colors-vllm.default.svc:8000/v1/unload_lora_adapter", 403, '{"message": "no"}')
    done = SharedSummary(
        server="colors", rollback="pinned colors-prod to job colors-v1", asked=3, answers={"red": 3}, stranger=[refused]
    )
    assert done.ok and "3 answers (3 x 'red'), 0 errors" in done.render()
    assert "1 of 1 attempts refused" in done.render() and "refused: unload at http://colors-vllm" in done.render()
    taken = Attempt("admin unload", "http://10.0.0.5:8000/mmrl/v1/adapters/unload", 200, "{}")
    assert not SharedSummary(server="colors", rollback="pinned", stranger=[refused, taken]).ok
    assert "NOT REFUSED: admin unload" in SharedSummary(server="colors", stranger=[taken]).render()
    assert not SharedSummary(server="colors", rollback="pinned").ok  # the stranger never ran
    assert not SharedSummary(server="colors", rollback="pinned", errors=["ApiException: 503"]).ok
    assert not SharedSummary(server="colors", rollback="pinned", error="colors-prod moved to colors-v2 within 120s").ok
    assert not SharedSummary(server="colors").ok  # never rolled back
