"""The memory inspector: what is stored for each session, as JSON views (``view``) and as an
HTTP app with a page (``app``), served by ``middleware inspect``."""
