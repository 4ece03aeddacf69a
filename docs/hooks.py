"""MkDocs hook: SECURITY.md lives at the repository's root (where GitHub shows it) and is included in the
site as docs/security.md; its links into docs/ are written from the root, so they are made relative to
docs/ here."""

from __future__ import annotations

import re
from typing import Any


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri == "security.md":
        markdown = re.sub(r"\]\(docs/", "](", markdown)
    return markdown
