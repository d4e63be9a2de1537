"""scripts/spy_summary.py over a small py-spy raw recording."""
from conftest import load_script

RAW = """\
process 1:"python -m cudnn_explorer model resnet50";<module> (cudnn_explorer/__main__.py:5);run (/x/cudnn_explorer/jobs/sweep.py:110);select (selectors.py:415) 300
process 1:"python -m cudnn_explorer model resnet50";<module> (cudnn_explorer/__main__.py:5);capture (/x/cudnn_explorer/jobs/sweep.py:62);_find_and_load (<frozen importlib._bootstrap>:1360) 50
process 2:"python -m cudnn_explorer.measure.engine_serve --serve";main (cudnn_explorer/measure/engine_serve.py:220);_release (cudnn_explorer/measure/engine_serve.py:190) 70
not a stack line
"""


def test_it_sums_processes_and_this_projects_frames(tmp_path, capsys):
    spy = load_script("spy_summary")
    stacks = spy.parse(RAW.splitlines())
    assert len(stacks) == 3  # the line that does not read is skipped
    assert list(spy.per_process(stacks).values()) == [350, 70]
    t = spy.tree([s for s in stacks if "model" in s[0]], depth=8)
    assert t[("<module> (cudnn_explorer/__main__.py:5)",)] == 350
    assert t[("<module> (cudnn_explorer/__main__.py:5)", "run (cudnn_explorer/jobs/sweep.py:110)",
              "~select (selectors.py:415)")] == 300
    raw = tmp_path / "spy.raw"
    raw.write_text(RAW)
    assert spy.main([str(raw), "--process", "engine_serve", "--min", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "    3.50 s  process 1:" in out and "    0.70 s    _release" in out
    assert spy.main([str(tmp_path / "missing.raw")]) == 2
    assert spy.main([str(raw), "--rate", "0"]) == 2
