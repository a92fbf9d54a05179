-- One row, rewritten by the write probe behind `/readyz` (`RunStore::probe_write`): a committed write
-- is the proof that the store can write now.
CREATE TABLE health (
    id        SMALLINT NOT NULL PRIMARY KEY CHECK (id = 1),
    probed_at BIGINT   NOT NULL
);
