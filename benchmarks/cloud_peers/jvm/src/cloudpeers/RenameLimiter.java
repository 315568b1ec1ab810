package cloudpeers;

/**
 * ABFS's client-side rate limit on the renames of job commit ({@code fs.azure.io.rate.limit},
 * permits per second, 0 = none), one per FileSystem instance as in ABFS: a smooth limiter that
 * lets an idle second's worth of permits be spent at once and otherwise spaces callers
 * {@code 1 / rate} apart, waiting outside its lock.
 */
final class RenameLimiter {
    private final double intervalNs;
    private final double maxStored;
    private double stored;
    private long nextFreeNs;

    RenameLimiter(int permitsPerSecond) {
        this.intervalNs = permitsPerSecond > 0 ? 1e9 / permitsPerSecond : 0.0;
        this.maxStored = permitsPerSecond;
        this.nextFreeNs = System.nanoTime();
    }

    /** Takes one permit; returns the nanoseconds waited. */
    long acquire() {
        if (intervalNs == 0.0) {
            return 0;
        }
        long wait = reserve(System.nanoTime());
        ServiceModel.sleepNs(wait);
        return wait;
    }

    private synchronized long reserve(long now) {
        if (now > nextFreeNs) {
            stored = Math.min(maxStored, stored + (now - nextFreeNs) / intervalNs);
            nextFreeNs = now;
        }
        long wait = nextFreeNs - now;
        double fromStored = Math.min(1.0, stored);
        stored -= fromStored;
        nextFreeNs += (long) ((1.0 - fromStored) * intervalNs);
        return wait;
    }
}
