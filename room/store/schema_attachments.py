"""Migration ``0014_attachments`` (named 0012 on its branch; renumbered in merge order): files people and agents attach to messages.

A row is one upload by one member in one project; its bytes live once on disk under
``<data>/attachments/<sha256[:2]>/<sha256[2:]>`` (content-addressed, shared by every upload of the
same content, in any project). ``message_id`` is set when a send takes the upload; until then only
its uploader may use it. ``thumb_sha256`` names the thumbnail's own blob (an image's, or a PDF's first page).
"""

ATTACHMENTS = """
CREATE TABLE attachments (
    id            INTEGER PRIMARY KEY,
    project_id    INTEGER NOT NULL REFERENCES projects(id),
    uploader_id   INTEGER NOT NULL REFERENCES members(id),
    sha256        TEXT NOT NULL,
    size          INTEGER NOT NULL,
    name          TEXT NOT NULL,
    mime          TEXT NOT NULL,
    kind          TEXT NOT NULL CHECK (kind IN ('image', 'file')),
    width         INTEGER,
    height        INTEGER,
    thumb_sha256  TEXT,
    thumb_mime    TEXT,
    message_id    INTEGER,
    created_at    REAL NOT NULL
);
CREATE INDEX attachments_project ON attachments(project_id, sha256);
CREATE INDEX attachments_sha256 ON attachments(sha256);
CREATE INDEX attachments_thumb ON attachments(thumb_sha256) WHERE thumb_sha256 IS NOT NULL;
CREATE INDEX attachments_message ON attachments(message_id) WHERE message_id IS NOT NULL;
"""

# Migration ``0026_pdf_previews``: a PDF's page count, beside the picture of its first page that
# ``thumb_sha256`` names (room.infra.pdfpreview); NULL for everything else.
PDF_PREVIEWS = """
ALTER TABLE attachments ADD COLUMN pages INTEGER
"""
PDF_PREVIEWS_PG = """
ALTER TABLE attachments ADD COLUMN pages bigint
"""
