-- Compressed rollups, TimescaleDB profile (issue 16 item 4). Uncompressed, a 1-minute rollup
-- cost about as much per GPU over its 90 days as 14 days of compressed raw samples. Each
-- continuous aggregate is compressed (segmented by GPU, ordered by bucket: TimescaleDB's
-- defaults for a view grouped by bucket and gpu) once its buckets are past the refresh
-- policy's window (1 minute: 7 days, 1 hour: 8), a day later, so the policies never refresh
-- into compressed chunks; late data older than the windows is folded in by
-- collector.store.maintenance.refresh_late_timescale, which refreshes compressed chunks too
-- (tests/test_store_timescale.py). The v1 rollups, which no longer refresh (kept for rows
-- before their cutover, no longer growing), stay as they are: TimescaleDB gives a continuous
-- aggregate a compression policy only with a refresh policy.

DO $$
DECLARE
    view_after text[];
BEGIN
    FOREACH view_after SLICE 1 IN ARRAY ARRAY[
        ['gpu_samples_1m_v2', '8 days'], ['gpu_samples_1h_v2', '9 days'],
        ['gpu_samples_1m_host', '8 days'], ['gpu_samples_1h_host', '9 days'],
        ['gpu_samples_1m_0061', '8 days'], ['gpu_samples_1h_0061', '9 days'],
        ['process_samples_1m', '8 days']]
    LOOP
        EXECUTE format('ALTER MATERIALIZED VIEW %I SET (timescaledb.compress = true)', view_after[1]);
        PERFORM add_compression_policy(view_after[1]::regclass, compress_after => view_after[2]::interval);
    END LOOP;
END
$$;
