-- The audit chain's end as last written (seq and this_hash of the last record), kept here as
-- well as in audit/head.json: `audit verify` checks the log holds this record, so cutting
-- the log's last lines takes rewriting this store too, not only the audit directory.
CREATE TABLE audit_witness (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    seq       INTEGER NOT NULL,
    this_hash TEXT    NOT NULL
);

-- Not yet seeded (seq -1): the first writable open records the log's end as it finds it.
-- The row is only ever updated, so a deleted row stays missing and `audit verify` says so.
INSERT INTO audit_witness (id, seq, this_hash) VALUES (1, -1, '');
