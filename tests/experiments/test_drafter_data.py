"""experiments/drafter_data.py: the arms differ only in their data, and bad
command lines are refused before any model or store loads."""

from experiments import drafter_data


def test_arms_differ_only_in_their_data():
  stores = {"sharegpt": "/s/sharegpt", "onpolicy": "/s/onpolicy"}
  s = drafter_data.ArmSettings(budget=1000, steps=7, window=32)
  cs = {a: drafter_data.arm_config(a, stores, "/runs", s).to_dict() for a in drafter_data.ARMS}
  assert cs["mix"]["store"] == "/s/sharegpt,/s/onpolicy"
  assert cs["onpolicy"]["store"] == "/s/onpolicy" and cs["sharegpt"]["store"] == "/s/sharegpt"
  for c in cs.values():
    assert c["data"]["max_target_tokens"] == 1000 and c["train"]["num_steps"] == 7
    assert c["data"]["window"] == 32 and c["head"]["init_from"] == ""
  strip = lambda c: {k: v for k, v in c.items() if k not in ("store", "workdir", "name")}
  assert strip(cs["sharegpt"]) == strip(cs["onpolicy"]) == strip(cs["mix"])
  assert len({c["workdir"] for c in cs.values()}) == 3


def test_bad_command_lines_name_the_flag():
  from tests.flag_errors import usage_errors
  msgs = usage_errors("experiments.drafter_data", [
      ["--arms=sharegpt,foo"], ["--phases=train,eval"], ["--temperatures=0,-1"],
      ["--budget=0"], ["--eval_permille=1000"], ["--extra_heads=mix=/x"],
      ["--prompt_sets=code"], ["--prompts_after=-1"], ["--arms=", "--reference="]],
      define="define_flags")
  for flag, msg in zip(["--arms", "--phases", "--temperatures", "--budget", "--eval_permille",
                        "--extra_heads", "--prompt_sets", "--prompts_after", "--arms"], msgs):
    assert flag in msg, (flag, msg)


def test_fresh_prompts_have_their_own_rows():
  """A replication on the prompts after the first N (``--prompts_after``) writes rows
  of its own; without it the rows keep the committed records' keys (they resume)."""
  from absl import flags
  rows = {}
  for after, arms in ((0, "sharegpt"), (16, "")):
    fv = flags.FlagValues()
    drafter_data.SPECS.define(fv)
    fv(["prog", f"--arms={arms}", "--reference=", "--extra_heads=a=/h,b=/g",
        f"--prompts_after={after}"])
    r = drafter_data.Run(*drafter_data.SPECS.build(fv))
    rows[after] = drafter_data.tau_cells(r, "/runs")
  per_head = 8  # chain and tree x 2 prompt sets x 2 temperatures
  assert [row["head"] for row in rows[0][::per_head]] == ["sharegpt", "a", "b"]
  assert [row["head"] for row in rows[16][::per_head]] == ["a", "b"]  # --arms=: no arm
  assert all("prompts_after" not in row for row in rows[0])
  assert all(row["prompts_after"] == 16 for row in rows[16])
