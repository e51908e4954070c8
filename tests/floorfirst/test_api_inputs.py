"""What a caller of floorfirst's functions can get wrong is one SpecError line; `import floorfirst`
brings in nothing heavy (checked in a fresh interpreter, after the names are used too)."""

import subprocess
import sys

import pytest

import floorfirst
from floorfirst import DeploymentSpec, Policy, SpecError

LAUNCH = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp 8"

BAD_CALLS = [
    (lambda: floorfirst.plan(gpu=8), "'gpu' is not a deployment knob"),
    (lambda: floorfirst.plan(model="no-such-model"), "no-such-model"),
    (lambda: floorfirst.plan(hardware="h9000"), "h9000"),
    (lambda: floorfirst.plan(attn="zz"), "attn='zz' is not a layout"),
    (lambda: floorfirst.plan(gpus=7.5), "gpus"),
    (lambda: floorfirst.plan(batch=0), "batch=0"),
    (lambda: floorfirst.plan(batch=True), "batch=True"),
    (lambda: floorfirst.plan(batch=1.5), "batch=1.5"),
    (lambda: floorfirst.plan(context="32q"), "not a token count"),
    (lambda: floorfirst.plan(context=-5), "must be a positive token count"),
    (lambda: floorfirst.plan(context={4096: 1.5}), "not a whole number"),
    (lambda: floorfirst.plan(context=[]), "context is empty"),
    (lambda: floorfirst.plan(prefill_context="8k"), "needs --prefill-tokens"),
    (lambda: floorfirst.plan(prefill_tokens=float("nan")), "prefill_tokens"),
    (lambda: floorfirst.plan(pricing="cheap"), "pricing='cheap'"),
    (lambda: floorfirst.plan(launch="vllm serve x y z"), "launch: 'y' is not a flag"),
    (lambda: floorfirst.plan(launch="vllm serve deepseek-ai/DeepSeek-V3.2 --tp-sise 8"), "launch: vllm flag --tp-sise"),
    (lambda: floorfirst.plan(launch=LAUNCH, gpus=4), "gpus=4 disagrees with the launch line"),
    (lambda: floorfirst.plan(launch=LAUNCH, spec=DeploymentSpec()), "not both"),
    (lambda: floorfirst.plan(spec={"model": "x"}), "is not a floorfirst.DeploymentSpec"),
    (lambda: floorfirst.compare(layouts=["tp/zz"]), "layout 'tp/zz' is not available"),
    (lambda: floorfirst.compare(host_tier="yes"), "host_tier='yes'"),
    (lambda: floorfirst.capacity(context="0"), "must be positive"),
    (lambda: floorfirst.simulate(policy="zz", requests=10), "zz"),
    (lambda: floorfirst.simulate(order="lifo", requests=10), "order='lifo'"),
    (lambda: floorfirst.simulate(rate=-1.0, requests=10), "rate=-1.0"),
    (lambda: floorfirst.simulate(requests=0), "requests=0"),
    (lambda: floorfirst.simulate(workload="no-such-workload", requests=10), "no-such-workload"),
    (lambda: Policy.from_launch(LAUNCH, hardware=None), "hardware= is required"),
    (lambda: Policy.from_launch(LAUNCH, hardware="h200", policy_knobs={"margn": 1}), "'margn' is not a policy knob"),
    (lambda: Policy.from_launch(LAUNCH, hardware="h200", policy_knobs={"allowed": ["tp", "zz"]}), "allowed layouts"),
    (lambda: Policy.from_launch(LAUNCH, hardware="h200", max_prefill_tokens=0), "max_prefill_tokens=0"),
    (lambda: DeploymentSpec.from_launch("sglang serve --pp-size 2", hardware="h200"), "pipeline"),
    (lambda: DeploymentSpec.from_launch("torchrun x.py", hardware="h200"), "launch: 'torchrun x.py' is not"),
]


@pytest.mark.parametrize("call,says", BAD_CALLS, ids=range(len(BAD_CALLS)))
def test_a_bad_input_is_one_line(call, says):
    with pytest.raises(SpecError) as exc:
        call()
    line = str(exc.value)
    assert "\n" not in line and says in line


def test_import_floorfirst_is_light():
    """No torch, scipy, matplotlib (nor the CLI's typer and rich) on import, nor once every function
    and the policy have run."""
    heavy = ("torch", "scipy", "matplotlib", "pandas", "typer", "rich", "cli")
    code = (
        "import sys, floorfirst\n"
        f"heavy = {heavy!r}\n"
        "first = sorted(m for m in sys.modules if m.split('.')[0] in heavy + ('numpy', 'pydantic', 'planner'))\n"
        "floorfirst.plan(); floorfirst.compare(); floorfirst.capacity(); floorfirst.simulate(requests=10)\n"
        "floorfirst.Policy.from_launch('vllm serve deepseek-ai/DeepSeek-V3.2 -tp 8', hardware='h200')\n"
        "after = sorted({m.split('.')[0] for m in sys.modules} & set(heavy))\n"
        "print(first, after)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[] []"


def test_names_are_exported():
    assert set(floorfirst.__all__) >= {"plan", "compare", "capacity", "simulate", "Policy", "BatchState", "Decision",
                                        "DeploymentSpec", "SpecError"}
    assert floorfirst.SpecError is __import__("planner").SpecError
    with pytest.raises(AttributeError):
        floorfirst.no_such_name
