"""The hub's commands. `mlxd pull REPO[@REV]`: preflight, download with a progress bar,
verify. `mlxd push MODEL ORG/NAME`: upload a model (usually a store entry `mlxd convert`
made); a preflight first, then one commit that a second push resumes."""

from __future__ import annotations

import argparse
import os
import sys
import threading
from typing import TYPE_CHECKING, Any

from mlxd.cli.render import human_size, print_error, print_json
from mlxd.errors import MlxdError, ModelBroken

if TYPE_CHECKING:
    from pathlib import Path

    from mlxd.cli.main import Subparsers
    from mlxd.store.hub.download import PullPlan


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("pull", help="download a model from the Hugging Face hub")
    p.add_argument("repo", help="ORG/NAME or ORG/NAME@REVISION")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_pull)
    _add_push(sub)


def cmd_pull(args: argparse.Namespace) -> int:
    from mlxd.store.health import check
    from mlxd.store.hub import download as D

    repo_id, revision = D.parse_repo_ref(args.repo)  # before any network call
    plan = D.preflight(repo_id, revision)
    D.check_disk_space(plan)
    path = _download_interruptibly(plan, args.json, show_bar=sys.stderr.isatty() and not args.json)
    report = check(path, deep=True)
    result = {
        "name": plan.repo_id,
        "revision": plan.commit,
        "path": str(path),
        "files": len(plan.files),
        "size": plan.total_bytes,
        "health": report.to_dict(),
    }
    if args.json:
        print_json(result)
    else:
        print(f"pulled {plan.repo_id} @ {plan.commit[:12]}: {len(plan.files)} files, "
              f"{human_size(plan.total_bytes)} -> {path}")  # fmt: skip
    if not report.ok:
        raise ModelBroken(f"{plan.repo_id} downloaded but unhealthy: {report.problems[0].message}")
    return 0


def _download_interruptibly(plan: PullPlan, json_mode: bool, show_bar: bool) -> Path:
    """Run the download in a worker thread so the main thread keeps Ctrl-C: on interrupt we
    exit 130 at once (huggingface_hub's thread pool would otherwise finish every file in
    flight); completed files stay in the cache, and the next pull skips them and resumes
    the partial ones (store/resume.py)."""
    from mlxd.store.hub import download as D

    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["path"] = D.download(plan)
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            outcome["error"] = e

    worker = threading.Thread(target=work, name="mlxd-pull", daemon=True)
    try:
        worker.start()
        _wait(worker, plan, show_bar)
    except KeyboardInterrupt:
        message = f"interrupted; run `mlxd pull {plan.repo_id}` again to resume"
        print_error(MlxdError(message), json_mode=json_mode)
        sys.stdout.flush()
        os._exit(130)
    if "error" in outcome:
        raise outcome["error"]
    path: Path = outcome["path"]
    return path


def _wait(worker: threading.Thread, plan: PullPlan, show_bar: bool) -> None:
    from mlxd.store.hub.download import downloaded_bytes

    if not show_bar:
        while worker.is_alive():
            worker.join(0.2)
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns = (BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(plan.repo_id, total=plan.total_bytes or None)
        while worker.is_alive():
            progress.update(task, completed=min(downloaded_bytes(plan), plan.total_bytes))
            worker.join(0.2)


# ---- push ---------------------------------------------------------------------------


def _add_push(sub: Subparsers) -> None:
    p = sub.add_parser(
        "push",
        help="upload a model to the Hugging Face hub",
        description="Upload MODEL (a store name, org/name in the HF cache, or a directory) as "
        "the hub repo ORG/NAME. Checks first: the model is healthy, a token is set "
        "(HF_TOKEN or `hf auth login`) and accepted, the repo is created if missing and "
        "refused if it holds model files (unless --force). Pushing again after an "
        "interruption uploads only what is missing.",
    )
    p.add_argument("model", help="the model to upload")
    p.add_argument("repo", help="ORG/NAME on the hub")
    p.add_argument("--private", action="store_true", help="create the repo private")
    p.add_argument("--force", action="store_true", help="upload into a repo that has files")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_push)


def cmd_push(args: argparse.Namespace) -> int:
    from mlxd.store.health import check
    from mlxd.store.hub.upload import check_repo_id, push_folder
    from mlxd.store.problems import Severity
    from mlxd.store.resolve import resolve

    check_repo_id(args.repo)  # before the model is looked at
    ref = resolve(args.model)
    blocking = (Severity.BROKEN, Severity.INCOMPLETE)  # too large to run here is still a model
    bad = [p for p in check(ref.path).problems if p.severity in blocking]
    if bad:
        raise ModelBroken(f"{ref.name} is {bad[0].severity.value} ({bad[0].message}): not pushed")
    bars = sys.stderr.isatty() and not args.json
    result = push_folder(ref.path, ref.name, args.repo, private=args.private, force=args.force,
                         progress=bars)  # fmt: skip
    if args.json:
        print_json(result.to_dict())
        return 0
    made = "created " if result.created else ""
    print(
        f"pushed {result.model} to {made}{result.repo_id}: {result.files} files, "
        f"{human_size(result.bytes)}, commit {result.commit[:12]} -> {result.url}"
    )
    return 0
