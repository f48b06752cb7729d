"""Gate results of a GPU machine, carried back as JUnit XML, become ledger records here."""
from r9k.registry import ledger as L
from r9k.registry import load_registry
from r9k.r9kctl.evidence.junit import read_junit, records_from_junit

XML = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="3">
<testcase classname="kernels.router.test_router" name="test_moe_route_gpu[16]" file="kernels/router/test_router.py" line="10" time="0.1"/>
<testcase classname="kernels.router.test_router" name="test_moe_route_gpu[4]" file="kernels/router/test_router.py" line="10" time="0.1"><failure message="boom">x</failure></testcase>
<testcase classname="kernels.router.test_router" name="test_router_gate_gpu[1]" file="kernels/router/test_router.py" line="20" time="0.1"><skipped message="needs a GPU">y</skipped></testcase>
</testsuite></testsuites>"""


def test_read_and_record(tmp_path):
    f = tmp_path / "j.xml"
    f.write_text(XML)
    out = read_junit(f)
    assert out == {
        "kernels/router/test_router.py::test_moe_route_gpu[16]": L.PASSED,
        "kernels/router/test_router.py::test_moe_route_gpu[4]": L.FAILED,
        "kernels/router/test_router.py::test_router_gate_gpu[1]": L.NEEDS_GPU,
    }
    reg = load_registry()
    recs = {r.variant: r for r in records_from_junit(reg, out, "cuda-h200")}
    assert "kernels/router/test_router.py::test_moe_route_gpu" in L.declared_tests(reg.variants["moe_fused_routing"])
    r = recs["moe_fused_routing"]
    assert r.platform == "cuda-h200" and r.result == "fail" and len(r.outcomes) == 2
    assert r.source_hash == L.source_hash(reg, reg.variants["moe_fused_routing"])[0]
