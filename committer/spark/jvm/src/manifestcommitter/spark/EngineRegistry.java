package manifestcommitter.spark;

/**
 * Holds the in-process engine that the PySpark driver registered through Py4J.
 *
 * <p>One JVM hosts one SparkContext and therefore at most one PySpark driver process, so a
 * single slot is enough. It is static because Spark instantiates the commit protocol itself, by
 * reflection, with no way to hand it an object.
 */
public final class EngineRegistry {
  private static volatile JobCommitEngine engine;

  private EngineRegistry() {}

  /** Registers {@code newEngine}, replacing any earlier one; returns the engine it replaced. */
  public static synchronized JobCommitEngine register(JobCommitEngine newEngine) {
    JobCommitEngine previous = engine;
    engine = newEngine;
    return previous;
  }

  /** Removes the registered engine, if any; returns it. Later jobs use the subprocess engine. */
  public static synchronized JobCommitEngine clear() {
    JobCommitEngine previous = engine;
    engine = null;
    return previous;
  }

  public static JobCommitEngine get() {
    return engine;
  }
}
