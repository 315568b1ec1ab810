package manifestcommitter.spark;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeMap;

/**
 * A small IOStatistics snapshot builder producing the JSON shape Hadoop uses
 * ({@code counters, gauges, minimums, maximums, meanstatistics}). Timed operations follow
 * Hadoop's naming: counter {@code X} / {@code X.failures}, {@code X.min}, {@code X.max},
 * {@code X.mean} with {@code samples} and {@code sum} (milliseconds).
 *
 * <p>Used by one task attempt on one thread, so it is not synchronized.
 */
final class IoStatistics {
  private final Map<String, Long> counters = new TreeMap<>();
  private final Map<String, Long> gauges = new TreeMap<>();
  private final Map<String, Long> minimums = new TreeMap<>();
  private final Map<String, Long> maximums = new TreeMap<>();
  private final Map<String, long[]> means = new TreeMap<>();

  void increment(String name, long by) {
    counters.merge(name, by, Long::sum);
  }

  void gauge(String name, long value) {
    gauges.put(name, value);
  }

  /** Records one timed operation {@code name} that took {@code millis} and did/didn't fail. */
  void timed(String name, long millis, boolean failed) {
    String key = failed ? name + ".failures" : name;
    // Hadoop always publishes both the success and the failure counters of a timed operation.
    counters.putIfAbsent(name, 0L);
    counters.putIfAbsent(name + ".failures", 0L);
    increment(key, 1);
    minimums.merge(key + ".min", millis, Math::min);
    maximums.merge(key + ".max", millis, Math::max);
    long[] mean = means.computeIfAbsent(key + ".mean", k -> new long[2]);
    mean[0] += 1;
    mean[1] += millis;
  }

  Map<String, Object> snapshot() {
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("counters", new LinkedHashMap<>(counters));
    out.put("gauges", new LinkedHashMap<>(gauges));
    out.put("minimums", new LinkedHashMap<>(minimums));
    out.put("maximums", new LinkedHashMap<>(maximums));
    Map<String, Object> meanStats = new LinkedHashMap<>();
    for (Map.Entry<String, long[]> e : means.entrySet()) {
      Map<String, Object> m = new LinkedHashMap<>();
      m.put("samples", e.getValue()[0]);
      m.put("sum", e.getValue()[1]);
      meanStats.put(e.getKey(), m);
    }
    out.put("meanstatistics", meanStats);
    return out;
  }
}
