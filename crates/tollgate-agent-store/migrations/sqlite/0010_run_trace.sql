-- A run's OpenTelemetry trace context (docs/telemetry.md): the W3C `traceparent` of its root span, written
-- once at creation when telemetry is on, so every process that drives, decides or expires the run later
-- continues the same trace. NULL without telemetry, and for every run created before this migration.
ALTER TABLE runs ADD COLUMN trace TEXT;
