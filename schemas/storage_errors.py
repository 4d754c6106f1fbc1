"""An object store's failures as one-line `OSError`s naming the object: what `schemas.storage`
and the pipeline's gs:// client raise. `store_errors(url)` turns the client's exceptions into
`FileNotFoundError` (no such object or bucket), `StoreAccessError` (a `PermissionError`: access
refused, or the credentials refused by the token service) or `StoreError` (any other answer, a
lost connection, the client's retries spent); `retry_always` is the client's retry for the
requests it would not retry by itself."""

from __future__ import annotations

import re
from contextlib import contextmanager


class StoreError(OSError):
    """An object store's refusal or failure, in one line naming the object (`store_errors`)."""


class StoreAccessError(StoreError, PermissionError):
    """The store refused access (401, 403): the credentials, or the bucket's permissions."""


def retry_always():
    """The client's retry (408, 429, 5xx, lost connections; two minutes) for an upload or a copy
    with no generation to match, which it would not retry: each try writes the same bytes."""
    from google.cloud.storage.retry import DEFAULT_RETRY

    return DEFAULT_RETRY


class Unreachable(ConnectionError):
    """The object store's API (or the proxy the environment names for it) took no connection."""


def require_client_library() -> None:
    try:
        import google.api_core.exceptions  # noqa: F401
        import google.auth  # noqa: F401
        import google.cloud.storage  # noqa: F401
    except ImportError:
        raise OSError(
            "gs:// paths need google-cloud-storage: pip install -e '.[gcs]' (make venv installs it)"
        ) from None


@contextmanager
def store_errors(url: str):
    """The client's exceptions as one-line OSErrors naming the URL: `FileNotFoundError`,
    `StoreAccessError`, `StoreError` (see the module's docstring)."""
    require_client_library()
    from google.api_core import exceptions as api
    from google.auth import exceptions as auth

    try:
        yield
    except api.NotFound:
        raise FileNotFoundError(f"{url}: not found (no such bucket or object)") from None
    except (api.Forbidden, api.Unauthorized) as e:
        raise StoreAccessError(
            f"{url}: the object store refused access ({_answer(e)}); {CHECK_CREDENTIALS} and "
            "the bucket's permissions"
        ) from None
    except api.GoogleAPICallError as e:
        raise StoreError(f"{url}: the object store answered {_answer(e)}") from None
    except api.RetryError as e:  # the client's retries spent: still 5xx, 429, or no connection
        raise StoreError(
            f"{url}: the object store kept failing through two minutes of retries "
            f"({first_line(e.cause or e)}); {LATER}"
        ) from None
    except Unreachable as e:
        raise StoreError(f"{url}: cannot reach the object store: {e}") from None
    except auth.RefreshError as e:  # no access token for the credentials
        raise _token_refused(url, e) from None
    except (auth.GoogleAuthError, ConnectionError, TimeoutError) as e:
        raise StoreError(
            f"{url}: cannot reach the object store ({type(e).__name__}: {first_line(str(e))})"
        ) from None
    except Exception as e:  # requests' and urllib3's transport errors, by module
        if type(e).__module__.split(".")[0] in ("requests", "urllib3", "google"):
            raise StoreError(
                f"{url}: cannot reach the object store ({type(e).__name__}: {first_line(str(e))})"
            ) from None
        raise


LATER = "try again later"  # a StoreError's advice when the store kept failing
CHECK_CREDENTIALS = (
    "check the credentials (GOOGLE_APPLICATION_CREDENTIALS, or `gcloud auth "
    "application-default login`)"
)


def _token_refused(url: str, e) -> StoreError:
    """Google's token service gave no access token for the credentials: it refused them (a
    key deleted or disabled, a clock far off: `invalid_grant`), or kept failing (retryable,
    after google-auth's own tries)."""
    said = first_line(e.args[0] if e.args else e)
    if getattr(e, "retryable", False):
        return StoreError(f"{url}: the object store's token service kept failing ({said}); {LATER}")
    return StoreAccessError(
        f"{url}: the object store's token service refused the credentials ({said}); "
        f"{CHECK_CREDENTIALS}: a key deleted or disabled, or this machine's clock far off"
    )


REQUEST = re.compile(r"^[A-Z]+ \S+: ")  # the method and URL the client's message begins with


def _answer(e) -> str:
    """The store's answer to a failed request: its code and the message of its JSON error,
    else the client's line without the request's method and URL."""
    try:
        said = e.response.json()["error"]["message"]
    except (AttributeError, ValueError, KeyError, TypeError):
        said = REQUEST.sub("", first_line(e.message))
    return f"{e.code} {first_line(said)}"


def first_line(text: object) -> str:
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return line[:300]
