"""Do `mmrl validate` and the apiserver agree on which job specs are valid? Generate specs (mutations of
examples/*.yaml, values from hypothesis strategies built from the models' schema) and compare the verdict of
`validate_as_apiserver` (`mmrl validate` before the GPU memory plan, which only it and the operator check) with a
server-side dry-run create against the installed CRD, for every one.

Prints the number of specs, how many each side accepted, the disagreements (the first few in full) and the
seconds spent generating and comparing; exits 1 on any disagreement.

    python bench/validation_agreement.py [--specs 5000] [--seed 0]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from kubernetes import client

import common
from mmrl_local.cluster.controlplane import ControlPlane
from mmrl_local.cluster.crd_install import install_mmrl_crd
from mmrl_local.toolchain import build
from tests.support import validation_agreement as agreement

NS = "bench-validation"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--specs", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=common.RESULTS)
    args = parser.parse_args()

    started = time.monotonic()
    specs = agreement.generate(args.specs, args.seed)
    generate_s = time.monotonic() - started
    print(f"generated {len(specs)} specs in {generate_s:.1f} s", flush=True)
    with ControlPlane(binaries=build.build(verbose=False)) as cp:
        api = common.bench_client(cp.api_client())
        install_mmrl_crd(api)
        common.create_namespace(client.CoreV1Api(api), NS)
        started = time.monotonic()
        result = agreement.compare(api, NS, specs)
        compare_s = time.monotonic() - started
    accepted = sum(agreement.local_verdict(s).accepted for s in specs)
    print(
        f"{len(specs)} specs: mmrl validate accepted {accepted}, disagreements {len(result.disagreements)}; "
        f"dry runs took {compare_s:.1f} s ({1000 * compare_s / len(specs):.1f} ms per spec)"
    )
    for d in result.disagreements[:5]:
        print(d)
    common.write_result(
        "validation-agreement",
        {
            "specs": len(specs),
            "seed": args.seed,
            "accepted_by_mmrl_validate": accepted,
            "accepted_by_apiserver": result.server_accepted,
            "disagreements": len(result.disagreements),
            "generate_s": round(generate_s, 1),
            "compare_s": round(compare_s, 1),
        },
        args.out,
    )
    return 1 if result.disagreements else 0


if __name__ == "__main__":
    raise SystemExit(main())
