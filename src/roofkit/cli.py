"""roofkit command line: ``list | verify | eval | bench | tune | device | report``, a thin shell over the harness."""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path

SUITES = ("llama3-8b", "llama3-70b", "qwen2-7b", "gemma-7b", "gpt2", "edge", "acceptance", "dlrm", "host")


def _setup_backend() -> bool:
    """Switch the Triton interpreter on when there is no CUDA device (before triton is imported).
    Returns whether a CUDA device is present."""
    import torch

    has_cuda = torch.cuda.is_available()
    if not has_cuda:
        # Set outright: an inherited value that Triton reads as off ("", "0", "false", ...)
        # would leave it compiling for a GPU that is not there.
        from ._env import interpreter_active  # not roofkit.ops: importing it defines every kernel

        if not interpreter_active():
            os.environ["TRITON_INTERPRET"] = "1"
        # The interpreter evaluates masked-off lanes with numpy (e.g. -inf - -inf); those lanes
        # are never stored, and their warnings are noise to a user.
        import warnings

        for msg in ("invalid value encountered", "divide by zero encountered", "overflow encountered"):
            warnings.filterwarnings("ignore", message=msg, category=RuntimeWarning)
    return has_cuda


def _console():
    from rich.console import Console

    # Wide enough for the results table when the output is a file or a pipe.
    return Console() if sys.stdout.isatty() else Console(width=220)


def _select_specs(names):
    from roofkit.harness import registry

    specs = registry.all_specs()
    if not names:
        return specs
    known = {s.name: s for s in specs}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"roofkit: unknown op(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return [known[n] for n in names]


def _dtype(name):
    import torch

    aliases = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
    dt = getattr(torch, aliases.get(name, name), None)
    if not isinstance(dt, torch.dtype):
        raise SystemExit(f"roofkit: unknown dtype {name!r} (use float32, float16 or bfloat16)")
    return dt


# ----------------------------------------------------------------------------- commands


def cmd_list(args) -> int:
    from rich.table import Table

    from roofkit.harness import baselines
    from roofkit.harness.bench import provider_callables

    t = Table(title="registered ops" + (" (providers as available here)" if args.providers else ""))
    for col in ("op", "dtypes", "cases", "suites", "providers"):
        t.add_column(col)
    missing: dict[tuple[str, str], list[str]] = {}  # (provider, reason) -> ops
    for s in _select_specs(args.ops):
        fns, skipped = provider_callables(s, None) if args.providers else ({}, {})
        # (without --providers, only whether each peer library is installed: nothing is built)
        absent = {n for n in s.baselines if n in baselines.PEERS and not baselines.installed(baselines.PEERS[n][0])}
        prov = ", ".join(["roofkit"] + [f"{n} ([yellow]not installed[/yellow])" if n in absent else n
                                        for n in s.baselines])
        for n in absent if not args.providers else ():
            missing.setdefault((n, f"not installed ({baselines.PEERS[n][1]})"), []).append(s.name)
        if args.providers:
            short = {n: why.split(" (")[0] for n, why in skipped.items()}
            prov = ", ".join(list(fns) + [f"{n} ([yellow]{short[n]}[/yellow])" for n in skipped])
            for n, why in skipped.items():
                missing.setdefault((n, why), []).append(s.name)
        t.add_row(
            s.name,
            ", ".join(str(d).removeprefix("torch.") for d in s.dtypes),
            str(len(s.cases)),
            ", ".join(k for k, v in s.suites.items() if v),
            prov,
        )
    console = _console()
    console.print(t)
    if missing:
        console.print("providers that cannot run here (bench records them as skipped"
                      + ("" if args.providers else "; `roofkit list --providers` checks every provider") + "):",
                      markup=False, highlight=False)
        for (name, why), ops in sorted(missing.items()):
            console.print(f"  {name}: {why}; for {', '.join(ops)}", markup=False, highlight=False)
    elif args.providers:
        console.print("every provider can run here")
    return 0


def _run_verify(specs, *, dtypes=None, quick=False, slow=False, seeds=3, console) -> bool:
    import time

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from roofkit.harness.verify import default_device, verify_op, verify_plan

    t = Table(title="roofkit verify (float64 reference)")
    for col in ("op", "rows passed", "worst err_l2 / budget", "result"):
        t.add_column(col)
    ok = True
    device = default_device()
    plans = {spec.name: len(verify_plan(spec, dtypes=dtypes, quick=quick, slow=slow, seeds=seeds, device=device))
             for spec in specs}
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=console)
    task = progress.add_task("verify", total=sum(plans.values()))
    reports = {}
    with progress:
        for i, spec in enumerate(specs, 1):
            start, done = time.perf_counter(), progress.tasks[task].completed

            def on_row(row, spec=spec):
                progress.update(task, advance=1, description=f"{spec.name} {row.case} {row.dtype}")

            try:
                reports[spec.name] = verify_op(spec, dtypes=dtypes, quick=quick, slow=slow, seeds=seeds, device=device,
                                               on_row=on_row)
            except Exception:
                reports[spec.name] = traceback.format_exc()
                progress.update(task, completed=done + plans[spec.name])
                console.print(f"[{i}/{len(specs)}] [red]{spec.name}: verification raised[/red]")
                continue
            rep = reports[spec.name]
            n_ok = sum(r.passed for r in rep.rows)
            verdict = "passed" if rep.passed else "[red]FAILED[/red]"
            console.print(f"[{i}/{len(specs)}] {spec.name}: {n_ok}/{len(rep.rows)} rows {verdict} "
                          f"({time.perf_counter() - start:.1f} s)", highlight=False)
    for spec in specs:
        rep = reports[spec.name]
        if isinstance(rep, str):
            console.print(f"[red]{spec.name}: verification raised[/red]")
            console.print(rep)
            t.add_row(spec.name, "-", "-", "[red]ERROR[/red]")
            ok = False
            continue
        worst = max(
            (c for r in rep.rows for c in r.checks if c.budget_l2 == c.budget_l2 and c.budget_l2 > 0),
            key=lambda c: c.err_l2 / c.budget_l2,
            default=None,
        )
        ratio = f"{worst.err_l2 / worst.budget_l2:.2f} ({worst.err_l2:.2g}/{worst.budget_l2:.2g})" if worst else "-"
        n_ok = sum(r.passed for r in rep.rows)
        t.add_row(spec.name, f"{n_ok}/{len(rep.rows)}", ratio, "pass" if rep.passed else "[red]FAIL[/red]")
        if not rep.passed:
            ok = False
            for r in rep.failures():
                console.print(f"[red]FAIL[/red] {r.describe()}")
    console.print(t)
    return ok


def cmd_verify(args) -> int:
    console = _console()
    dtypes = [_dtype(d) for d in args.dtype] if args.dtype else None
    specs = _select_specs(args.ops)
    if dtypes:
        # A named op must take every --dtype; without names, ops that take none of them are left out.
        name = lambda d: str(d).removeprefix("torch.")  # noqa: E731
        for spec in specs:
            unsupported = [d for d in dtypes if d not in spec.dtypes]
            if unsupported and args.ops:
                console.print(f"[red]roofkit verify: {spec.name} does not take {', '.join(map(name, unsupported))}[/red]; "
                              f"its dtypes are {', '.join(map(name, spec.dtypes))}")
                return 2
        specs = [s for s in specs if any(d in s.dtypes for d in dtypes)]
        if not specs:
            console.print(f"[red]roofkit verify: no op takes {', '.join(map(name, dtypes))}[/red]")
            return 2
    ok = _run_verify(specs, dtypes=dtypes, quick=args.quick, slow=args.slow, seeds=args.seeds, console=console)
    return 0 if ok else 1


def cmd_eval(args) -> int:
    import json

    import torch

    from roofkit.harness.evaluate import EvaluationError, evaluate

    aliases = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
    dtypes = [getattr(torch, aliases.get(d, d), None) for d in args.dtype or ()]
    if not all(isinstance(d, torch.dtype) for d in dtypes):
        print(f"roofkit eval: unknown dtype in {args.dtype} (use float32, float16 or bfloat16)", file=sys.stderr)
        return 2
    on_cpu = args.device == "cpu" or (args.device is None and not torch.cuda.is_available())
    if on_cpu and args.cases and any(c.startswith("gpu_") for c in args.cases):
        print("roofkit eval: the gpu_ cases run on the CPU here (through the Triton interpreter when the "
              "candidate uses Triton): a correctness check that can take minutes, and nothing is timed "
              "(timing needs a GPU)", file=sys.stderr)
    if on_cpu and any(d in (torch.float16, torch.bfloat16) for d in dtypes or (torch.float16, torch.bfloat16)):
        try:
            uses_triton = "triton" in Path(args.candidate).read_text(errors="replace")
        except OSError:  # (the evaluation says what is wrong with the file)
            uses_triton = False
        if uses_triton:
            print("roofkit eval: on the CPU a Triton candidate runs through the interpreter, which truncates "
                  "float32 to bfloat16 where a GPU rounds to nearest even: its 16-bit error may exceed the "
                  "budget on some seeds (--dtype float32 judges it without that)", file=sys.stderr)
    try:
        rep = evaluate(args.candidate, args.op, cases=args.cases, quick=args.quick, seeds=args.seeds,
                       timeout_s=args.timeout, total_timeout_s=args.total_timeout, dtypes=dtypes or None,
                       hidden=args.hidden, backward=args.backward, device=args.device,
                       timing=False if args.no_time else None, reps=args.reps, baselines=not args.no_baselines)
    except EvaluationError as e:
        print(f"roofkit eval: {e}", file=sys.stderr)
        return 2
    print(rep.summary())
    if rep.rows:
        print(rep.table())
    if args.json:
        Path(args.json).write_text(json.dumps(rep.to_json(), indent=1, default=str))
    if rep.error is not None:
        return 2
    return 0 if rep.accepted else 1


def cmd_bench(args) -> int:
    import torch

    console = _console()
    specs = _select_specs(args.ops)
    if not torch.cuda.is_available():
        console.print(
            "[bold yellow]No CUDA GPU found: timing needs a GPU.[/bold yellow] Running the correctness "
            "checks on small shapes instead (the Triton interpreter on CPU; `roofkit verify --quick`)."
        )
        ignored = [flag for flag, used in (("--suite", args.suite != "llama3-8b"), ("--providers", args.providers),
                                           ("--cases", args.cases), ("--l2", args.l2 != "cold"), ("--graph", args.graph),
                                           ("--calls", args.calls != 2000),
                                           ("--graph-calls", args.graph_calls is not None),
                                           ("--out", args.out != "roofkit-out")) if used]
        console.print("Nothing is written" + (f"; ignored without a GPU: {' '.join(ignored)}." if ignored else "."))
        ok = _run_verify(specs, quick=True, seeds=3, console=console)
        console.print("correctness checks " + ("passed" if ok else "[red]FAILED[/red]"))
        return 0 if ok else 1

    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from roofkit.harness import roofline
    from roofkit.harness.bench import HOST_SUITE, HostOptions, bench_case, bench_items
    from roofkit.harness.device import environment, load_ceilings
    from roofkit.harness.record import write_results
    from roofkit.harness.report import host_table, results_table, write_host_csv

    import dataclasses

    device = torch.device("cuda", torch.cuda.current_device())
    env = environment(device)
    console.print(f"GPU: {env['gpu']} (driver {env['driver']}), torch {env['torch']}, triton {env['triton']}")
    ceilings = load_ceilings(device)
    console.print(
        f"measured ceilings: {ceilings.copy_gbps:.0f} GB/s copy, {ceilings.read_gbps:.0f} GB/s read, "
        + ", ".join(f"{k} {v:.0f}" for k, v in ceilings.matmul_tflops.items()) + " TFLOP/s"
    )
    host = None
    if args.suite == HOST_SUITE:
        if args.calls < 1 or (args.graph_calls is not None and args.graph_calls < 1):
            console.print("[red]roofkit bench: --calls and --graph-calls must be at least 1[/red]")
            return 2
        host = HostOptions(calls=args.calls, graph_calls=args.graph_calls)
        if args.l2 != "cold" or args.graph:
            console.print("--l2 and --graph do not apply to the host suite "
                          "(nothing is flushed; the graph replay is always timed)")
    items = bench_items(specs, args.suite)
    if args.cases:
        items = [it for it in items if it[1].name in args.cases]
    if not items:
        console.print(f"[red]no benchmark cases in suite {args.suite!r} for {', '.join(s.name for s in specs)}[/red]")
        return 1
    records = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console) as prog:
        task = prog.add_task("bench", total=len(items))
        for spec, case, dtype in items:
            prog.update(task, description=f"{spec.name} {case.name} {str(dtype).removeprefix('torch.')}")
            records += bench_case(spec, case, dtype, ceilings, providers=args.providers, l2=args.l2, graph=args.graph,
                                  device=device, host=host)
            prog.advance(task)
    out = Path(args.out)
    paths = write_results(out, records, env, dataclasses.asdict(ceilings))
    if host is not None:
        # Host rows have no device time to place on the roofline: the wide table and CSV instead.
        extra = write_host_csv(out / "host.csv", records)
        title = f"roofkit bench --suite host ({env['gpu']}, {host.calls} calls per run)"
        console.print(host_table(records, title=title))
    else:
        extra = out / "roofline.png"
        roofline.plot([dataclasses.asdict(r) for r in records], ceilings, extra,
                      title=f"roofkit bench --suite {args.suite}", families={s.name: s.marker or s.name for s in specs})
        console.print(results_table(records, title=f"roofkit bench --suite {args.suite} ({env['gpu']}, {args.l2} L2)"))
    skipped = sorted({(r.provider, r.status) for r in records if r.status.startswith("skipped")})
    for prov, status in skipped:
        console.print(f"provider {prov}: {status}", markup=False, highlight=False)
    bad = [r for r in records if r.status == "ok" and r.verified is False]
    for r in bad:
        console.print(f"[red]unverified[/red] {r.op} {r.case} {r.provider}: {escape(r.verify_detail)}")
    console.print(f"wrote {paths['json']}, {paths['csv']}, {extra}")
    ours_bad = [r for r in bad if r.provider == "roofkit"]
    return 1 if ours_bad else 0


def cmd_tune(args) -> int:
    import torch

    from roofkit.harness.tune import cache_files, environment_note, tune_case, tune_items, tune_table

    console = _console()
    specs = _select_specs(args.ops)
    try:
        items, untunable = tune_items(specs, args.suite, args.cases)
    except ValueError as exc:
        console.print(f"[red]roofkit tune: {exc}[/red]")
        return 2
    if not torch.cuda.is_available():
        console.print("[bold red]roofkit tune: tuning needs a CUDA GPU[/bold red] (candidate configurations are run "
                      "and timed on the device); none was found, so nothing was tuned or written. Without tuned "
                      "configurations the ops use their documented defaults.")
        return 2
    for name in untunable:
        console.print(f"{name}: nothing to tune (no autotuner)")
    if not items:
        tunable = [s.name for s in specs if s.tuners]
        console.print("nothing to tune" if not tunable else
                      f"[red]no cases in suite {args.suite!r} for {', '.join(tunable)}[/red]")
        return 0 if not tunable else 1

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    device = torch.device("cuda", torch.cuda.current_device())
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console) as prog:
        task = prog.add_task("tune", total=len(items))
        results = []
        for spec, case, dtype in items:
            prog.update(task, description=f"{spec.name} {case.name} {str(dtype).removeprefix('torch.')}")
            results.append(tune_case(spec, case, dtype, device))
            prog.advance(task)
    console.print(tune_table(results, title=f"roofkit tune --suite {args.suite} ({torch.cuda.get_device_name(device)})"))
    console.print("cache: " + ", ".join(map(str, cache_files(specs, device))))
    note = environment_note()
    if note:
        console.print(f"[yellow]{note}[/yellow]")
    return 0 if all(r.ok for r in results) else 1


def cmd_device(args) -> int:
    import dataclasses

    import torch
    from rich.table import Table

    from roofkit.harness.device import DATASHEET, datasheet_for, device_info, load_ceilings

    console = _console()
    if not torch.cuda.is_available():
        console.print("No CUDA GPU found: nothing to measure" + (" and no ceilings to write" if args.json else "")
                      + ". Datasheet figures (dense) for reference:")
        t = Table()
        t.add_column("GPU")
        cols = list(next(iter(DATASHEET.values())))
        for c in cols:
            t.add_column(c, justify="right")
        for name, row in DATASHEET.items():
            t.add_row(name, *["-" if row[c] is None else f"{row[c]:g}" for c in cols])
        console.print(t)
        return 1 if (args.measure or args.json) else 0
    info = device_info()
    console.print(
        f"{info.name}: {info.sm_count} SMs, L2 {info.l2_bytes} B, {info.total_memory_bytes / 2**30:.1f} GiB, "
        f"compute capability {info.capability}, driver {info.driver}"
    )
    ceil = load_ceilings(measure=args.measure, refresh=args.measure)
    sheet = datasheet_for(info.name)
    t = Table(title="ceilings: measured on this GPU, datasheet beside")
    for col in ("ceiling", "measured", "datasheet"):
        t.add_column(col, justify="right" if col != "ceiling" else "left")
    sd = sheet[1] if sheet else {}
    if ceil is None:
        console.print("no measured ceilings cached yet: run `roofkit device --measure`")
    rows = [("copy bandwidth, read+write (GB/s)", ceil and ceil.copy_gbps, sd.get("hbm_gbps")),
            ("read bandwidth (GB/s)", ceil and ceil.read_gbps, sd.get("hbm_gbps"))]
    for key, sheet_key in (("bf16", "bf16_tflops"), ("fp16", "fp16_tflops"), ("tf32", "tf32_tflops"),
                           ("fp32", "fp32_tflops"), ("fp8_e4m3", "fp8_tflops"), ("int8", "int8_tops")):
        unit = "TOP/s" if key == "int8" else "TFLOP/s"
        rows.append((f"{key} GEMM ({unit})", ceil.matmul_tflops.get(key) if ceil else None, sd.get(sheet_key)))
    for name, m, d in rows:
        t.add_row(name, "-" if m is None else f"{m:.0f}", "-" if d is None else f"{d:g}")
    console.print(t)
    if sheet:
        console.print(f"datasheet row: {sheet[0]} (vendor figures, dense)")
    if ceil is not None:
        console.print(f"measured {ceil.measured_at}: {ceil.method}")
        if args.json:
            Path(args.json).write_text(__import__("json").dumps(dataclasses.asdict(ceil), indent=2))
    return 0


def cmd_report(args) -> int:
    from roofkit.harness.record import load_results
    from roofkit.harness.report import compare_runs, comparison_table, host_table, results_table, split_host

    console = _console()
    try:
        env, _, recs = load_results(args.results)
        if args.other:
            env2, _, recs2 = load_results(args.other)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        console.print(f"[red]roofkit report: cannot read a results.json: {type(exc).__name__}: {exc}[/red]")
        return 2
    device_recs, host_recs = split_host(recs)
    if device_recs or not host_recs:
        console.print(results_table(device_recs, title=f"{args.results} ({env.get('gpu')}, {env.get('date')})"))
    if host_recs:
        console.print(host_table(host_recs, title=f"{args.results}: host suite ({env.get('gpu')}, {env.get('date')})"))
    if args.other:
        rows = compare_runs(recs, recs2)
        console.print(comparison_table(rows, title=f"new: {args.other} vs old: {args.results} (ratio = new/old)"))
        n_reg = sum(r.regression for r in rows)
        console.print(f"{len(rows)} matched rows, {n_reg} regression(s) beyond noise")
        return 1 if n_reg else 0
    return 0


def cmd_e2e(args) -> int:
    from . import e2e

    return e2e.main(args.rest)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="roofkit", description="Verified Triton kernels, placed on the roofline of this GPU.")
    from . import __version__

    p.add_argument("--version", action="version", version=f"roofkit {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("list", help="registered ops, their dtypes, cases, suites and providers")
    s.add_argument("ops", nargs="*")
    s.add_argument("--providers", action="store_true", help="check which baseline providers are installed")
    s.set_defaults(func=cmd_list)

    s = sub.add_parser("verify", help="check ops against their float64 references (exit 1 on any failure)")
    s.add_argument("ops", nargs="*")
    s.add_argument("--dtype", action="append", help="float32, float16 or bfloat16 (repeatable)")
    s.add_argument("--quick", action="store_true", help="only the cases tagged quick")
    s.add_argument("--slow", action="store_true", help="include cases tagged slow (GPU)")
    s.add_argument("--seeds", type=int, default=3, help="fresh random inputs per case and dtype (default: 3)")
    s.set_defaults(func=cmd_verify)

    s = sub.add_parser("eval", help="judge a candidate file's implementation of an op in a separate process "
                       "(exit 0 accepted, 1 rejected, 2 could not run; docs/eval.md)")
    s.add_argument("candidate", help="a Python file defining a function named like the op")
    s.add_argument("--op", required=True, help="the registered op it implements (roofkit list)")
    s.add_argument("--cases", nargs="+", help="only these case names of the op (default: every CPU case)")
    s.add_argument("--dtype", action="append", help="float32, float16 or bfloat16 (repeatable)")
    s.add_argument("--quick", action="store_true", help="only the cases tagged quick")
    s.add_argument("--seeds", type=int, default=2, help="calls on fresh inputs per case and dtype (default: 2)")
    s.add_argument("--hidden", type=int, default=3,
                   help="shapes no case of the op has, drawn afresh and judged beside the cases (default: 3)")
    s.add_argument("--backward", action="store_true",
                   help="require the op's backward (an output without an autograd graph is rejected); without it a "
                        "candidate's gradients are judged when its output carries a graph")
    s.add_argument("--timeout", type=float, default=120.0, help="seconds one call may take (default: 120)")
    s.add_argument("--total-timeout", type=float, default=1800.0,
                   help="seconds the whole evaluation may take (default: 1800)")
    s.add_argument("--device", help="cpu (the Triton interpreter) or cuda (default: cuda where a GPU is present)")
    s.add_argument("--reps", type=int, default=10, help="timed calls per case on a GPU, fresh inputs each (default: 10)")
    s.add_argument("--no-time", action="store_true", help="on a GPU: judge correctness only, no timed round")
    s.add_argument("--no-baselines", action="store_true",
                   help="do not time roofkit, torch and torch.compile beside the candidate")
    s.add_argument("--json", help="also write the report to this JSON file")
    s.set_defaults(func=cmd_eval)

    s = sub.add_parser("bench", help="verify, time and place every provider on a suite's shapes")
    s.add_argument("ops", nargs="*")
    s.add_argument("--suite", default="llama3-8b", choices=SUITES,
                   help="shapes to time (default: llama3-8b); host: decode-sized shapes timed by what a call costs "
                        "the host (wall time per call of back-to-back calls, and of a CUDA graph of them)")
    s.add_argument("--providers", nargs="+", help="subset of providers (roofkit, torch, torch.compile, liger, flaggems, and op-specific ones: "
                   "see `roofkit list OPS --providers`)")
    s.add_argument("--cases", nargs="+", help="only these case names of the suite")
    s.add_argument("--l2", default="cold", choices=("cold", "warm"),
                   help="cold: 2x the L2 size written before every timed call (default); warm: not")
    s.add_argument("--graph", action="store_true", help="time CUDA-graph replays")
    s.add_argument("--calls", type=int, default=2000,
                   help="host suite: back-to-back calls per timed run, followed by one synchronize (default: 2000)")
    s.add_argument("--graph-calls", type=int, default=None,
                   help="host suite: calls held by the replayed CUDA graph (default: as many as --calls)")
    s.add_argument("--out", default="roofkit-out",
                   help="folder for results.json, results.csv, roofline.png (default: roofkit-out)")
    s.set_defaults(func=cmd_bench)

    s = sub.add_parser("tune", help="tune launch configurations on a suite's shapes into the keyed cache that later calls "
                       "read (needs a GPU; exit 2 without one)")
    s.add_argument("ops", nargs="*")
    s.add_argument("--suite", default="llama3-8b", choices=SUITES, help="shapes to tune (default: llama3-8b)")
    s.add_argument("--cases", nargs="+", help="only these case names of the suite")
    s.set_defaults(func=cmd_tune)

    s = sub.add_parser("device", help="this GPU's facts and measured ceilings, datasheet beside")
    s.add_argument("--measure", action="store_true", help="measure now (and cache)")
    s.add_argument("--json", help="also write the ceilings to this JSON file")
    s.set_defaults(func=cmd_device)

    s = sub.add_parser("e2e", add_help=False, help="a whole transformers model (train, prefill or decode) with eager, "
                       "torch.compile, Liger and roofkit, each in its own process (`roofkit e2e --help`)")
    s.add_argument("rest", nargs=argparse.REMAINDER)
    s.set_defaults(func=cmd_e2e)

    s = sub.add_parser("report", help="table of a results.json; with two (old, new), the ratio per row and "
                       "the regressions beyond noise (the sum of both rows' p20-p80 spreads, at least 2%%)")
    s.add_argument("results")
    s.add_argument("other", nargs="?")
    s.set_defaults(func=cmd_report)
    return p


BENCH_EXTRA = ("rich", "matplotlib")  # what the command line imports beyond the ops' own dependencies


def missing_bench_extra() -> list[str]:
    """The packages of roofkit's ``bench`` extra that the command line needs and cannot import."""
    import importlib.util

    return [m for m in BENCH_EXTRA if importlib.util.find_spec(m) is None]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] != ["e2e"]:
        args = build_parser().parse_args(argv)  # --help and --version need nothing more
    missing = missing_bench_extra()
    if missing:
        print(f"roofkit: the command line needs the bench extra ({', '.join(missing)} not installed): "
              'python -m pip install "roofkit[bench]" (from a clone: python -m pip install -e ".[bench]")',
              file=sys.stderr)
        return 2
    _setup_backend()
    try:
        if argv[:1] == ["e2e"]:  # its own options (argparse's remainder would not take them after a subcommand)
            return cmd_e2e(argparse.Namespace(rest=argv[1:]))
        return args.func(args)
    except BrokenPipeError:
        # (the reader went away, as `| head` does: stop without a traceback; what is left to print
        # goes nowhere, Python's own flush at exit included)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
