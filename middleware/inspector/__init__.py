"""The memory inspector: what is stored for each session, as JSON views (``view``) and as an
HTTP app with a page (``app``), served by ``middleware inspect``."""

from ..exceptions import require

require("starlette", "serve", "starlette uvicorn")  # the library alone: the inspector comes with an extra
