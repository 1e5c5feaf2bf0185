"""Execute every notebook in notebooks/ with nbclient (fail on any error).

Slow (a minute or two each on a CPU): CI runs them in the `slow` step.
"""

import glob
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.basename(p) for p in NOTEBOOKS])
def test_notebook_executes(path):
  nbformat = pytest.importorskip("nbformat")
  nbclient = pytest.importorskip("nbclient")
  nb = nbformat.read(path, as_version=4)
  client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                   resources={"metadata": {"path": ROOT}})
  client.execute()  # raises CellExecutionError on the first failing cell


def test_notebooks_present():
  names = {os.path.basename(p) for p in NOTEBOOKS}
  assert "01_quickstart.ipynb" in names
