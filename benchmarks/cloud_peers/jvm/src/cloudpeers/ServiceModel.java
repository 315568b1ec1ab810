package cloudpeers;

import java.io.IOException;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.LongAdder;
import java.util.concurrent.locks.LockSupport;

/**
 * The simulated account's service model, shared by every thread and every FileSystem instance
 * of the JVM (an account throttles all of its clients together).
 *
 * <p>Each request first asks the account's token bucket for a token (rate {@code opsLimit} per
 * second, capacity {@code opsLimit x burstS}, starting full: the simulator's
 * {@code committer/testing/cloud_sim/throttle.py}). Admitted, it is carried out at once and its
 * answer arrives after a lognormal delay of the given median and 99th percentile (drawn, as the
 * simulator's {@code latency.py} does, from a table of 65,536 seeded draws). Refused, nothing is
 * done, the 503 answer arrives after its own delay, and the caller backs off as the ABFS
 * client's exponential retry policy does (Hadoop 3.4+ defaults: 500 ms minimum, 500 ms delta
 * randomised to 80-120 %, 25 s maximum, 30 retries), then sends the request again.
 */
final class ServiceModel {
    static final ServiceModel INSTANCE = new ServiceModel();

    /** The standard normal distribution's 99th percentile. */
    private static final double Z99 = 2.3263478740408408;
    private static final int TABLE_BITS = 16;

    // The ABFS client's exponential retry policy (fs.azure.io.retry.* defaults).
    static final long MIN_BACKOFF_MS = 500;
    static final long MAX_BACKOFF_MS = 25_000;
    static final long DELTA_BACKOFF_MS = 500;
    static final int MAX_RETRIES = 30;

    /** An operation on the local disk, run once the account admits the request. */
    interface Body<T> {
        T run() throws IOException;
    }

    private volatile boolean enabled;
    private long[] delaysNs = new long[0];
    private long medianNs;
    // the token bucket; guarded by "this"
    private double rate;
    private double capacity;
    private double tokens;
    private long lastNs;

    private final Map<String, LongAdder> requests = new ConcurrentHashMap<>();
    private final LongAdder throttled = new LongAdder();
    private final LongAdder backoffNs = new LongAdder();

    private ServiceModel() {
    }

    synchronized void configure(double medianMs, double p99Ms, double opsLimit, double burstS,
                                long seed) {
        if (medianMs < 0 || p99Ms < 0 || (medianMs > 0 && p99Ms < medianMs)) {
            throw new IllegalArgumentException("latency: median " + medianMs + " ms, p99 "
                + p99Ms + " ms (both >= 0, p99 >= median)");
        }
        if (opsLimit < 0 || burstS <= 0) {
            throw new IllegalArgumentException("ops limit must be >= 0 and burst > 0");
        }
        medianNs = (long) (medianMs * 1e6);
        if (medianMs > 0 && p99Ms > medianMs) {
            double mu = Math.log(medianMs / 1000.0);
            double sigma = Math.log(p99Ms / medianMs) / Z99;
            Random rng = new Random(seed);
            delaysNs = new long[1 << TABLE_BITS];
            for (int i = 0; i < delaysNs.length; i++) {
                delaysNs[i] = (long) (Math.exp(mu + sigma * rng.nextGaussian()) * 1e9);
            }
        } else {
            delaysNs = new long[0];
        }
        rate = opsLimit;
        capacity = opsLimit * burstS;
        tokens = capacity;
        lastNs = System.nanoTime();
    }

    /** Off: calls run straight on local disk, uncounted (the untimed set-up). */
    void setEnabled(boolean on) {
        synchronized (this) {
            tokens = capacity;
            lastNs = System.nanoTime();
        }
        enabled = on;
    }

    boolean enabled() {
        return enabled;
    }

    void reset() {
        requests.clear();
        throttled.reset();
        backoffNs.reset();
    }

    /** One request of kind {@code op}, retried while the account throttles it. */
    <T> T call(String op, Body<T> body) throws IOException {
        if (!enabled) {
            return body.run();
        }
        LongAdder count = requests.computeIfAbsent(op, k -> new LongAdder());
        for (int retry = 0; ; retry++) {
            count.increment();
            if (admit()) {
                try {
                    return body.run();
                } finally {
                    sleepNs(draw());
                }
            }
            throttled.increment();
            sleepNs(draw());
            if (retry >= MAX_RETRIES) {
                throw new IOException(op + ": 503 ServerBusy (account throttled) after "
                    + MAX_RETRIES + " retries");
            }
            long wait = backoffMs(retry + 1) * 1_000_000L;
            backoffNs.add(wait);
            sleepNs(wait);
        }
    }

    /** The ABFS exponential back-off before retry number {@code n} (from 1). */
    static long backoffMs(int n) {
        long low = (long) (DELTA_BACKOFF_MS * 0.8);
        long high = (long) (DELTA_BACKOFF_MS * 1.2);
        long delta = low + ThreadLocalRandom.current().nextLong(high - low);
        double grown = Math.pow(2, n - 1) * delta;
        return Math.round(Math.min(MIN_BACKOFF_MS + grown, MAX_BACKOFF_MS));
    }

    private synchronized boolean admit() {
        if (rate <= 0) {
            return true;
        }
        long now = System.nanoTime();
        if (now > lastNs) {
            tokens = Math.min(capacity, tokens + (now - lastNs) * 1e-9 * rate);
            lastNs = now;
        }
        if (tokens >= 1.0) {
            tokens -= 1.0;
            return true;
        }
        return false;
    }

    private long draw() {
        long[] table = delaysNs;
        if (table.length == 0) {
            return medianNs;
        }
        return table[ThreadLocalRandom.current().nextInt(table.length)];
    }

    static void sleepNs(long ns) {
        if (ns <= 0) {
            return;
        }
        long deadline = System.nanoTime() + ns;
        for (long left = ns; left > 0; left = deadline - System.nanoTime()) {
            LockSupport.parkNanos(left);
        }
    }

    Map<String, Long> requestCounts() {
        Map<String, Long> out = new TreeMap<>();
        requests.forEach((k, v) -> out.put(k, v.sum()));
        return out;
    }

    long requestTotal() {
        long total = 0;
        for (LongAdder v : requests.values()) {
            total += v.sum();
        }
        return total;
    }

    long throttledTotal() {
        return throttled.sum();
    }

    double backoffSeconds() {
        return backoffNs.sum() / 1e9;
    }
}
