-- Issue 13 item 4: a normalised form beside the user's words (reply_length "简洁" -> "short", a city's English
-- name). JSON text, NULL when the writer gave none; `value` keeps what the user said.
ALTER TABLE memories ADD COLUMN IF NOT EXISTS canonical text;
