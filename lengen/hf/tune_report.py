"""What `lengen hf tune` reports: the ranking of the settings tried (tune.json's and tune.csv's rows),
the roles the chosen setting does not beat on the evaluation slice, and the printed table and notes."""

from __future__ import annotations

import math

from lengen.formatting import count_noun
from lengen.hf.search import SearchResult


def no_better_than(evaluation: list[dict]) -> list[str]:
    """The roles ("rope", "default") the chosen setting does not beat on the evaluation slice: lower
    perplexity, or with passkey scores, higher accuracy (ties: lower perplexity). The default is
    left out when it is the chosen setting itself."""
    rows = {e["role"]: e for e in evaluation}
    chosen = rows["chosen"]

    def score(e):
        return (e.get("eval_passkey", 0), -e["eval_ppl"])

    return [role for role in ("rope", "default") if role in rows and rows[role]["spec"] != chosen["spec"]
            and not score(chosen) > score(rows[role])]


def ranking_rows(result: SearchResult, n_items: int) -> list[dict]:
    rows = [{"rank": i + 1, "spec": t.spec, "method": t.setting.method,
             "tune_ppl": math.exp(t.mean) if t.nll else None, "sequences": len(t.nll),
             "status": t.status(n_items), "default": t.default, "stage": t.stage}
            for i, t in enumerate(result.ranked(n_items))]
    return rows + [{"rank": None, "spec": s.spec, "method": s.method, "tune_ppl": None, "sequences": 0,
                    "status": "not run", "default": None, "stage": None} for s in result.not_run]


def evaluation_source(meta: dict) -> str:
    """Where a tune record's evaluation slice came from, in words."""
    if meta["eval_text"]:
        return f"--eval-text {meta['eval_text']}"
    return "the same text, other sequences" if meta["shared_documents"] else "the same text, other documents"


def format_result(output: dict) -> str:
    """The ranked table, the chosen setting against plain RoPE and the default on the evaluation
    slice, and the extend() call."""
    n = len(output["meta"]["tune_slice"])
    pk = output["meta"]["passkey"] > 0
    lines = ["| rank | spec | tune ppl | sequences | status | default |" + (" tune passkey |" if pk else ""),
             "|---|---|---|---|---|---|" + ("---|" if pk else "")]
    for r in output["ranking"]:
        ppl = "" if r["tune_ppl"] is None else f"{r['tune_ppl']:.4f}"
        acc = "" if r.get("tune_passkey") is None else f"{r['tune_passkey']:.2f}"
        lines.append(f"| {r['rank'] or ''} | {r['spec']} | {ppl} | {r['sequences']}/{n} | {r['status']} | "
                     f"{'yes' if r['default'] else ''} |" + (f" {acc} |" if pk else ""))
    meta = output["meta"]
    where = evaluation_source(meta)
    lines += ["", f"chosen: {output['chosen']} (tune ppl {output['tune_ppl']:.4f} on {count_noun(n, 'sequence')})",
              f"evaluation slice ({count_noun(len(meta['eval_slice']), 'sequence')}, {where}; last {meta['segment']} "
              f"tokens at length {meta['length']}):"]
    lines += [f"  {e['role']:8s} {e['spec']:40s} ppl {e['eval_ppl']:.4f}"
              + (f"  passkey {e['eval_passkey']:.2f}" if "eval_passkey" in e else "") for e in output["evaluation"]]
    worse = no_better_than(output["evaluation"])
    if worse:
        score = {e["role"]: f"ppl {e['eval_ppl']:.4f}" + (f", passkey {e['eval_passkey']:.2f}" if "eval_passkey" in e
                                                          else "") for e in output["evaluation"]}
        names = {"rope": "plain RoPE", "default": "the method's default"}
        lines.append(f"note: on the evaluation slice the chosen setting ({score['chosen']}) is no better than "
                     + " or ".join(f"{names[w]} ({score[w]})" for w in worse)
                     + ": its lead on the tune slice did not carry over")
    if meta["shared_documents"]:
        lines.append(f"note: the evaluation slice shares documents with the tune slice (other tokens): "
                     f"{', '.join(meta['shared_documents'])}")
    if meta["out_of_budget"]:
        lines.append(f"the budget ran out: rerun with a larger --budget to search further (scores are cached)")
    lines += ["", output["call"]]
    return "\n".join(lines)
