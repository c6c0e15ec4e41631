-- Longer chunks for the 1-hour rollups, TimescaleDB profile (issue 16 item 4). Every continuous
-- aggregate's materialization hypertable got TimescaleDB's default chunk interval, ten times its
-- source's: 2.5 days for the 1-minute rollups (over the raw 6-hour chunks) and, as TimescaleDB
-- derives it the same way for an aggregate built on another, 2.5 days for the 1-hour ones too.
-- A compressed batch holds one GPU's rows of one chunk, so a 1-hour chunk gave batches of 60 rows
-- and the 1-hour rollups compressed about 2x (docs/benchmarks.md). 30 days hold 720 rows per GPU;
-- a chunk is compressed once all of it is 9 days old (0090's compress_after), so at most 39 days
-- of 1-hour rows stay uncompressed (a few hundred KB per GPU), and retention drops 30 days at a
-- time within the 2 years. The 1-minute rollups keep 2.5 days: 3,600 rows per GPU already fill
-- 1,000-row batches, and a longer chunk would only keep more of them uncompressed.
--
-- set_chunk_time_interval on a continuous aggregate sets its materialization hypertable's, for
-- the chunks made from now on; the chunks already there keep theirs. All four 1-hour rollups,
-- the v1 one included (it no longer refreshes, but maintenance still folds late rows into it).

SELECT set_chunk_time_interval(view_name::regclass, INTERVAL '30 days')
FROM (VALUES ('gpu_samples_1h_v1'), ('gpu_samples_1h_v2'), ('gpu_samples_1h_host'), ('gpu_samples_1h_0061'))
    AS v(view_name);
