"""README's results tables, generated from the committed records (never typed by hand).

    python benchmarks/readme_tables.py           # rewrite the block between the README's markers
    python benchmarks/readme_tables.py --check   # exit 1 if the README's block is not what the records give

First the newest committed `roofkit e2e` run of each mode (a whole model per provider). Then, for
every llama3-8b case of every registered op: the newest committed run (benchmarks/results/**/results.json,
by the record file's date) that timed roofkit and another provider whose result verified on it (else
the newest that timed roofkit alone), and from that run the fastest other verified provider. One table per op family (the spec's test marker).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BEGIN, END = "<!-- results:begin (benchmarks/readme_tables.py) -->", "<!-- results:end -->"
SUITE = "llama3-8b"
# Left out of the headline: compared with torch's unfused math attention only (no fused torch
# kernel takes flash_attention's bottom-right causal mask with the log-sum-exp).
APART = ("flash_attention",)


def _runs():
    """(date, file, records) of every committed bench run, oldest first."""
    runs = []
    for path in sorted((ROOT / "benchmarks" / "results").rglob("results.json")):
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or "records" not in data:
            continue
        date = str(data.get("environment", {}).get("date", path.parent.name))
        runs.append((date, path.relative_to(ROOT).as_posix(), data["records"], data.get("environment", {})))
    return sorted(runs, key=lambda r: r[0])


def _ms(r):
    return r.get("median_ms") if r.get("status") == "ok" else None


def tables(runs) -> tuple[str, str]:
    """(headline, per-op table) of ``runs`` (``_runs()``)."""
    sys.path.insert(0, str(ROOT / "src"))
    from roofkit.harness import registry

    rows, missing, sources, ratios = [], [], set(), []
    for spec in registry.all_specs():
        for case in spec.suites.get(SUITE, []):
            for dtype in spec.case_dtypes(case):
                dname = str(dtype).removeprefix("torch.")
                found = alone = None
                for date, path, records, env in reversed(runs):
                    mine = [r for r in records if r.get("op") == spec.name and r.get("case") == case.name
                            and r.get("dtype") == dname]
                    ours = [r for r in mine if r.get("provider") == "roofkit" and _ms(r)]
                    # (roofkit's own variants, e.g. roofkit.unfused, are not another provider)
                    others = [r for r in mine if not str(r.get("provider", "roofkit")).startswith("roofkit")]
                    if ours and any(_ms(r) and r.get("verified") for r in others):
                        found = (date, path, ours[0], others, env)
                        break
                    if ours and alone is None:  # (a roofkit-only run, e.g. a before / after comparison)
                        alone = (date, path, ours[0], others, env)
                found = found or alone
                label = case.name if dname == "bfloat16" else f"{case.name} ({dname})"
                if found is None:
                    missing.append(f"{spec.name} {label}")
                    continue
                date, path, ours, others, env = found
                sources.add(f"{path} ({env.get('gpu', '?')}, {date[:10]})")
                timed = [r for r in others if _ms(r) and r.get("verified")]
                best = min(timed, key=_ms) if timed else None
                roof = f"{ours['roof_pct']:.0f}" if ours.get("roof_pct") is not None else ""
                mark = ("" if ours.get("verified") else " (unverified)") + (" (implausible)" if ours.get("implausible") else "")
                other = f"{best['provider']} {_ms(best):.4g}" if best else "none timed"
                ratio = f"{_ms(best) / _ms(ours):.2f}x" if best else ""
                if best and ours.get("verified") and spec.name not in APART:
                    ratios.append(_ms(best) / _ms(ours))
                rows.append(f"| {spec.name} | {label} | {_ms(ours):.4g}{mark} | {roof} | {other} | {ratio} |")
    geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios)) if ratios else float("nan")
    headline = (f"Headline: on {len(ratios)} llama3-8b rows with another verified provider timed (flash_attention's "
                f"apart), roofkit is at least as "
                f"fast as the fastest of them on {sum(r >= 1.0 for r in ratios)}, within 5 % on "
                f"{sum(0.95 <= r < 1.0 for r in ratios)} more; geometric mean of (fastest other / roofkit) "
                f"{geomean:.2f} (above 1: roofkit faster); the rows behind and what limits them: docs/results.md.")
    out = ["| op | llama3-8b case | roofkit ms | % of roof | fastest other verified, ms | roofkit vs it |",
           "| --- | --- | --- | --- | --- | --- |", *rows, ""]
    if missing:
        out += ["Not measured yet: " + ", ".join(missing) + ".", ""]
    out += ["Records (each row from the newest run that timed another verified provider beside roofkit; later "
            "roofkit-only runs, such as before / after comparisons, are in benchmarks/results/): "
            + "; ".join(sorted(sources)) + "."]
    return headline, "\n".join(out)


def e2e_table(runs) -> str:
    """The newest `roofkit e2e` run of each mode among ``runs`` (``_runs()``), as a table."""
    newest = {}
    for date, path, records, env in runs:
        if records and "op" not in records[0] and records[0].get("mode") in ("train", "prefill", "decode"):
            newest[records[0]["mode"]] = (date, path, records, env)
    out = []
    order = ("train", "prefill", "decode")  # (the steadiest figure first: decode is host-bound)
    for mode, (date, path, records, env) in sorted(newest.items(), key=lambda kv: order.index(kv[0])):
        records = sorted(records, key=lambda r: r["provider"] != "eager")  # (eager first, as the ratios' base)
        r0 = records[0]
        unit = "ms / token" if mode == "decode" else "ms / step"
        if mode != "train":  # (no loss, optimizer or memory story: one sentence)
            procs = max((len(r.get("process_ms") or ()) for r in records), default=0)
            alternating = any(r.get("alternating") for r in records)
            steps = next((r["steps"] // (r.get("pooled") or 1) for r in records if r.get("steps")), None)
            command = (f"roofkit e2e --model {r0['model']} --layers {r0['layers']} --mode {mode} --batch {r0['batch']} "
                       f"--seq {r0['seq']} --providers {' '.join(r['provider'] for r in records)}"
                       + (f" --steps {steps}" if steps else "") + (f" --processes {procs}" if procs > 1 else "")
                       + (" --alternate" if alternating else ""))
            of = (" in each process" if alternating else " of the median process") if procs > 1 else ""
            vs = ("a ratio to eager is the median over rounds of eager's time over the provider's, the providers "
                  "alternating in one process") if alternating else "vs eager"
            lead = ""
            parts = [f"{r['provider']} {r['step_ms']:.1f}" + (f" ({r['vs_eager']:.2f}x)" if r.get("vs_eager") else "")
                     if r.get("status") == "ok" else f"{r['provider']} {r.get('status')}" for r in records]
            if alternating:  # (the result first: each provider's ratio to eager, then the figures and the method)
                lead = "; ".join(f"{r['provider']} {r['vs_eager']:.2f}x eager" + (
                    (" (pooled rounds; " if r.get("pooled") else " (median process; ")
                    + " ".join(f"{x:.2f}x" if x else "none" for x in r["process_paired"]) + " per process)"
                    if r.get("process_paired") else "") for r in records
                    if r["provider"] != "eager" and r.get("status") == "ok" and r.get("vs_eager"))
                lead = lead + ". " if lead else ""
                parts = [f"{r['provider']} " + " ".join(f"{x:.1f}" if x else "failed" for x in r["process_ms"])
                         if r.get("status") == "ok" and r.get("process_ms") else
                         f"{r['provider']} {r['step_ms']:.1f}" if r.get("status") == "ok"
                         else f"{r['provider']} {r.get('status')}" for r in records]
            out += [f"End to end, {mode}{': ' + lead if lead else ' '}(`{command}`, {env.get('gpu', '?')}, {date[:10]}; {path}), {unit}{of} "
                    f"({vs}): " + ", ".join(parts) + ".", ""]
            continue
        out += [f"End to end (`roofkit e2e --model {r0['model']} --layers {r0['layers']} --mode {mode} --batch "
                f"{r0['batch']} --seq {r0['seq']}`, {env.get('gpu', '?')}, {date[:10]}; {path}):", "",
                f"| provider | {unit} | tokens/s | vs eager | peak GiB | step-0 loss | AdamW |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        for r in records:
            if r.get("status") != "ok":
                out.append(f"| {r['provider']} | {r.get('status')}: {str(r.get('error', ''))[:60]} | | | | | |")
                continue
            peak = f"{r['peak_bytes'] / 2**30:.1f}" if r.get("peak_bytes") else ""
            loss = "" if r.get("loss0") is None else f"{r['loss0']:.4f}"
            adamw = {"roofkit.optim.AdamW": "roofkit", "torch.optim.AdamW": "torch (fused)"}.get(r.get("optimizer"), "")
            out.append(f"| {r['provider']} | {r['step_ms']:.1f} | {r['tokens_per_s']:,.0f} | {r.get('vs_eager', 1.0):.2f}x | "
                       f"{peak} | {loss} | {adamw} |")
        out.append("")
    return "\n".join(out)


def _block(text: str) -> tuple[int, int]:
    a, b = text.find(BEGIN), text.find(END)
    if a < 0 or b < a:
        raise SystemExit(f"README.md has no block between {BEGIN!r} and {END!r}")
    return a + len(BEGIN), b


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 when the README's block differs")
    args = p.parse_args(argv)
    text = README.read_text()
    a, b = _block(text)
    runs = _runs()  # (every record file read once)
    headline, rows = tables(runs)  # the headline first, then the whole-model runs, then the rows
    new = "\n" + headline + "\n\n" + e2e_table(runs) + "\n" + rows + "\n"
    if args.check:
        if text[a:b] != new:
            print("README.md's results tables differ from the records: run python benchmarks/readme_tables.py")
            return 1
        return 0
    README.write_text(text[:a] + new + text[b:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
