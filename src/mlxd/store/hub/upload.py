"""`push`: upload a model to the Hugging Face hub with huggingface_hub, after a preflight.

The preflight writes nothing remote: the repo id is valid, a token is set and the hub
accepts it, and the repo either does not exist (it is created, private if
asked) or holds no model files yet, unless `force`. The upload is one commit; weights go as
LFS objects the hub keeps even when the commit never comes, so pushing again after an
interruption sends only what is missing (and files the repo has unchanged not at all).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlxd.errors import AuthError, InvalidRequest, UploadError, one_line
from mlxd.store.files import dir_size, model_files
from mlxd.store.hub.download import hub_endpoint, hub_error, parse_repo_ref

if TYPE_CHECKING:
    from huggingface_hub import HfApi

# Files of a new repo that are not a model: a repo holding only these is not overwritten.
_REPO_SCAFFOLD = frozenset({".gitattributes"})


@dataclass(frozen=True, slots=True)
class PushResult:
    model: str
    repo_id: str
    url: str
    commit: str
    files: int
    bytes: int
    created: bool
    private: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_repo_id(repo: str) -> str:
    """`repo` as a hub repo id (ORG/NAME, no revision: a push goes to main)."""
    repo_id, revision = parse_repo_ref(repo)
    if revision is not None:
        raise InvalidRequest("push goes to the main branch: drop the @revision", param="repo")
    return repo_id


def push_folder(
    folder: Path,
    name: str,
    repo: str,
    *,
    private: bool = False,
    force: bool = False,
    progress: bool = False,
) -> PushResult:
    """Upload the model directory `folder` (known as `name`) as hub repo `repo`; `progress`
    shows huggingface_hub's bars on stderr. The caller checked the model's health.

    Raises InvalidRequest (bad repo id, a repo with model files without `force`), AuthError
    (no token, or refused) or UploadError (the hub failed)."""
    repo_id = check_repo_id(repo)
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    (enable_progress_bars if progress else disable_progress_bars)()
    api = _authorized_api()
    created = _ensure_repo(api, repo_id, private, force)
    try:
        info = api.upload_folder(
            repo_id=repo_id,
            folder_path=folder,
            commit_message=f"Upload {Path(name).name} with mlxd",
            ignore_patterns=[".*", "**/.*"],
        )
    except Exception as e:  # noqa: BLE001 - mapped to one clear line
        raise _push_error(e, repo_id) from e
    files = model_files(folder)
    return PushResult(name, repo_id, f"{api.endpoint}/{repo_id}", str(info.oid), len(files),
                      dir_size(folder), created, private)  # fmt: skip


def _authorized_api() -> HfApi:
    from huggingface_hub import HfApi, get_token

    token = get_token()
    if not token:
        raise AuthError("no Hugging Face token: set HF_TOKEN or run `hf auth login`")
    api = HfApi(endpoint=hub_endpoint(), token=token)
    try:
        api.whoami()
    except Exception as e:  # noqa: BLE001 - mapped to one clear line
        status = getattr(getattr(e, "response", None), "status_code", None)
        if status == 401:
            raise AuthError("the hub refused the Hugging Face token (HF_TOKEN)") from e
        raise _push_error(e, "the hub") from e
    return api


def _ensure_repo(api: HfApi, repo_id: str, private: bool, force: bool) -> bool:
    """Create the repo if it is missing (True); refuse one with model files unless `force`."""
    from huggingface_hub.errors import RepositoryNotFoundError

    try:
        info = api.model_info(repo_id)
    except RepositoryNotFoundError:
        try:
            api.create_repo(repo_id, private=private)
        except Exception as e:  # noqa: BLE001 - mapped to one clear line
            raise _push_error(e, repo_id) from e
        return True
    except Exception as e:  # noqa: BLE001 - mapped to one clear line
        raise hub_error(e, repo_id, None) from e
    present = sorted({s.rfilename for s in info.siblings or []} - _REPO_SCAFFOLD)
    if present and not force:
        raise InvalidRequest(
            f"{repo_id} already holds {len(present)} files ({present[0]}, ...): pass --force "
            "to upload over them",
            param="repo",
        )
    return False


def _push_error(e: BaseException, repo_id: str) -> Exception:
    """A failed upload in one line; 401/403: the token may not write there."""
    status = getattr(getattr(e, "response", None), "status_code", None)
    if status in (401, 403):
        return AuthError(f"the hub refused the upload to {repo_id} ({status}): the token "
                         "needs write access there")  # fmt: skip
    where = f" (HTTP {status})" if status else ""
    if "httpx" in type(e).__module__ and status is None:
        where = f" (cannot reach the hub at {hub_endpoint() or 'https://huggingface.co'})"
    return UploadError(f"upload to {repo_id} failed{where}: {one_line(e, with_type=False)}")
