package manifestcommitter.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;
import org.apache.hadoop.conf.Configuration;
import org.apache.spark.SparkEnv;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The driver's way to the Python engine: one {@code python -m committer.spark.driver --serve}
 * per JVM and interpreter, shared by all jobs; JSON lines on its pipes, never credentials on its
 * command line or environment. Replaced when dead; stops when its input closes (docs/spark.md).
 */
final class EngineClient {
  static final String PYTHON_KEY = "spark.manifest.committer.python";
  static final String PYTHONPATH_KEY = "spark.manifest.committer.pythonpath";
  static final String MODULE = "committer.spark.driver";

  /** The request protocol this jar speaks; the engine's {@code PROTOCOL_VERSION}. */
  static final int PROTOCOL = 2;

  private static final Logger LOG = LoggerFactory.getLogger(EngineClient.class);
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final long START_TIMEOUT_SECONDS = 300;
  private static final long EXIT_WAIT_SECONDS = 10;
  private static final Map<List<String>, EngineClient> ENGINES = new ConcurrentHashMap<>();

  static {
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      for (EngineClient engine : ENGINES.values()) {
        engine.stop();
      }
    }, "manifest-committer-engine-shutdown"));
  }

  private final List<String> command;
  private final String pythonPath;
  private EngineProcess current;  // guarded by this

  private EngineClient(String python, String pythonPath) {
    this.command = List.of(python, "-m", MODULE, "--serve");
    this.pythonPath = pythonPath;
  }

  /** The engine of this JVM for the interpreter the job's configuration names. */
  static EngineClient forJob(Configuration conf) {
    String python = firstNonEmpty(conf.get(PYTHON_KEY), sparkConf(PYTHON_KEY),
        sparkConf("spark.pyspark.driver.python"), sparkConf("spark.pyspark.python"),
        System.getenv("PYSPARK_DRIVER_PYTHON"), System.getenv("PYSPARK_PYTHON"), "python3");
    String pythonPath = firstNonEmpty(conf.get(PYTHONPATH_KEY), sparkConf(PYTHONPATH_KEY), "");
    return ENGINES.computeIfAbsent(List.of(python, pythonPath),
        k -> new EngineClient(k.get(0), k.get(1)));
  }

  String description() {
    return "subprocess " + command;
  }

  private static String sparkConf(String key) {
    SparkEnv env = SparkEnv.get();
    return env != null && env.conf().contains(key) ? env.conf().get(key) : null;
  }

  private static String firstNonEmpty(String... values) {
    for (String v : values) {
      if (v != null && !v.trim().isEmpty()) {
        return v.trim();
      }
    }
    return "";
  }

  /**
   * What the engine reads of {@code conf}: the keys (with or without Spark's
   * {@code spark.hadoop.}) under the prefixes its ready line names, and the JVM properties it
   * names (the proxy ABFS follows). The engine declares them, so they are listed in one place.
   */
  Map<String, String> forwardedConf(Configuration conf) throws IOException {
    EngineProcess engine = running();
    Map<String, String> out = new LinkedHashMap<>();
    for (Map.Entry<String, String> e : conf) {
      String key = e.getKey();
      String bare = key.startsWith("spark.hadoop.") ? key.substring("spark.hadoop.".length()) : key;
      if (engine.confPrefixes.stream().anyMatch(bare::startsWith)) {
        out.put(key, conf.get(key));  // resolves ${var} as Hadoop's own readers would
      }
    }
    for (String name : engine.jvmProperties) {
      String value = System.getProperty(name);
      if (value != null && !out.containsKey(name)) {
        out.put(name, value);
      }
    }
    return out;
  }

  /** Runs {@code operation}; its {@code result}, or an exception with the engine's message. */
  JsonNode call(String operation, Map<String, Object> request) throws IOException {
    Map<String, Object> doc = new LinkedHashMap<>();
    doc.put("operation", operation);
    doc.putAll(request);
    String response = send(JSON.writeValueAsString(doc));
    JsonNode node;
    try {
      node = JSON.readTree(response);
    } catch (IOException e) {
      throw new IOException("the Python engine returned a malformed response to " + operation
          + ": " + shorten(response, 500), e);
    }
    if (!node.path("ok").asBoolean(false)) {
      throw new IOException(operation + " failed (" + node.path("errorType").asText("error")
          + "): " + node.path("error").asText("(no message)"));
    }
    return node.path("result");
  }

  private static String shorten(String text, int limit) {
    return text.length() <= limit ? text : text.substring(0, limit) + "...";
  }

  private String send(String requestJson) throws IOException {
    for (int attempt = 0; ; attempt++) {
      EngineProcess process = running();
      try {
        return process.call(requestJson);
      } catch (NotSent e) {
        // The child was gone before it could read the request: a fresh one may safely run it.
        if (attempt > 0) {
          throw e;
        }
        LOG.warn("Manifest committer engine {} was gone; starting a new one", process);
      }
    }
  }

  private synchronized EngineProcess running() throws IOException {
    if (current == null || !current.alive()) {
      current = EngineProcess.start(command, pythonPath);
    }
    return current;
  }

  private synchronized void stop() {
    if (current != null) {
      current.stop();
      current = null;
    }
  }

  /** The request never reached the child. */
  static final class NotSent extends IOException {
    private static final long serialVersionUID = 1L;

    NotSent(String message) {
      super(message);
    }
  }

  /** One child process: its pipes, the requests waiting for it, the tail of its log. */
  private static final class EngineProcess {
    private static final int STDERR_TAIL_LINES = 60;

    private final Process process;
    private final OutputStream stdin;
    private final Map<Long, CompletableFuture<String>> pending = new ConcurrentHashMap<>();
    /** Completed by the child's "ready" line, as the answer to request 0. */
    private final CompletableFuture<String> ready = new CompletableFuture<>();
    private final AtomicLong ids = new AtomicLong();
    private final Deque<String> stderrTail = new ArrayDeque<>();
    private final Thread stderrThread;
    private volatile boolean closed;
    /** From the ready line: the configuration the engine reads. */
    private List<String> confPrefixes;
    private List<String> jvmProperties;

    private EngineProcess(Process process) {
      this.process = process;
      this.stdin = process.getOutputStream();
      pending.put(0L, ready);
      // The log reader first: at the child's end the response reader joins it for the tail.
      stderrThread = reader(process.getErrorStream(), "err", this::logLine);
      stderrThread.start();
      reader(process.getInputStream(), "out", this::deliver).start();
    }

    private Thread reader(InputStream stream, String name, Consumer<String> sink) {
      Thread t = new Thread(() -> {
        try (BufferedReader in = new BufferedReader(
            new InputStreamReader(stream, StandardCharsets.UTF_8))) {
          String line;
          while ((line = in.readLine()) != null) {
            sink.accept(line);
          }
        } catch (IOException e) {
          LOG.debug("Manifest committer engine {}: reading its std{} failed", process.pid(),
              name, e);
        }
        if (name.equals("out")) {
          exited();
        }
      }, "manifest-committer-engine-" + process.pid() + "-" + name);
      t.setDaemon(true);
      return t;
    }

    static EngineProcess start(List<String> command, String pythonPath) throws IOException {
      ProcessBuilder pb = new ProcessBuilder(new ArrayList<>(command));
      if (!pythonPath.isEmpty()) {
        String existing = pb.environment().get("PYTHONPATH");
        pb.environment().put("PYTHONPATH", existing == null || existing.isEmpty()
            ? pythonPath : pythonPath + File.pathSeparator + existing);
      }
      Process process;
      try {
        process = pb.start();
      } catch (IOException e) {
        throw new IOException("could not start the Python engine " + command + ": "
            + e.getMessage() + " (set spark.manifest.committer.python or"
            + " spark.pyspark.driver.python to a Python that has spark-manifest-committer"
            + " installed)", e);
      }
      EngineProcess engine = new EngineProcess(process);
      JsonNode hello;
      try {
        hello = JSON.readTree(engine.ready.get(START_TIMEOUT_SECONDS, TimeUnit.SECONDS));
      } catch (ExecutionException | TimeoutException | InterruptedException e) {
        if (e instanceof InterruptedException) {
          Thread.currentThread().interrupt();
        }
        process.destroyForcibly();
        String why = e instanceof ExecutionException ? ": " + e.getCause().getMessage()
            : e instanceof TimeoutException ? " within " + START_TIMEOUT_SECONDS + " s"
                + engine.exitDescription() : " (interrupted)";
        throw new IOException("the Python engine " + command + " did not start" + why, e);
      }
      if (hello.path("protocol").asInt() != PROTOCOL) {
        engine.stop();
        throw new IOException("the Python engine " + command + " speaks protocol "
            + hello.path("protocol") + ", this jar " + PROTOCOL + ": the jar must come from the"
            + " same spark-manifest-committer release as the Python package");
      }
      engine.confPrefixes = strings(hello.path("confPrefixes"));
      engine.jvmProperties = strings(hello.path("jvmProperties"));
      LOG.info("Manifest committer engine started: pid {}, {}", process.pid(), command);
      return engine;
    }

    private static List<String> strings(JsonNode array) {
      List<String> out = new ArrayList<>();
      array.forEach(item -> out.add(item.asText()));
      return out;
    }

    boolean alive() {
      return !closed && process.isAlive();
    }

    String call(String requestJson) throws IOException {
      long id = ids.incrementAndGet();
      CompletableFuture<String> answer = new CompletableFuture<>();
      pending.put(id, answer);
      byte[] line = ("{\"id\":" + id + ",\"request\":" + requestJson + "}\n")
          .getBytes(StandardCharsets.UTF_8);
      try {
        synchronized (stdin) {
          if (closed) {
            throw new IOException("engine stopped");
          }
          stdin.write(line);
          stdin.flush();
        }
      } catch (IOException e) {
        pending.remove(id);
        closed = true;  // the next request starts a new engine
        throw new NotSent("could not send the request to the Python engine (pid "
            + process.pid() + "): " + e.getMessage() + exitDescription());
      }
      try {
        return answer.get();
      } catch (ExecutionException e) {
        throw new IOException(e.getCause().getMessage(), e.getCause());
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        pending.remove(id);
        // The engine still runs the request to its end; only this thread stops waiting.
        throw new IOException("interrupted waiting for the Python engine (pid "
            + process.pid() + ")");
      }
    }

    /** The child's output ended: it exited, failing whatever still waits for it. */
    private void exited() {
      closed = true;
      IOException why = new IOException("the Python engine (pid " + process.pid()
          + ") exited before answering" + exitDescription());
      for (Long id : new ArrayList<>(pending.keySet())) {
        CompletableFuture<String> f = pending.remove(id);
        if (f != null) {
          f.completeExceptionally(why);
        }
      }
    }

    private void deliver(String line) {
      JsonNode doc;
      try {
        doc = JSON.readTree(line);
      } catch (IOException e) {
        LOG.warn("Manifest committer engine {}: unreadable output line: {}", process.pid(),
            shorten(line, 200));
        return;
      }
      long id = doc.path("ready").asBoolean(false) ? 0 : doc.path("id").asLong(-1);
      CompletableFuture<String> f = pending.remove(id);
      if (f == null) {
        LOG.warn("Manifest committer engine {}: answer to no request ({})", process.pid(),
            doc.path("id"));
      } else {
        f.complete(id == 0 ? line : doc.path("response").toString());
      }
    }

    /** A line of the child's log: to the driver's log, and kept for failure messages. */
    private void logLine(String line) {
      LOG.info("engine {}: {}", process.pid(), line);
      synchronized (stderrTail) {
        stderrTail.addLast(line);
        if (stderrTail.size() > STDERR_TAIL_LINES) {
          stderrTail.removeFirst();
        }
      }
    }

    /** ", exit status N:\n<log tail>" once the child is gone (waits briefly for its end). */
    String exitDescription() {
      StringBuilder out = new StringBuilder();
      try {
        if (process.waitFor(EXIT_WAIT_SECONDS, TimeUnit.SECONDS)) {
          out.append(", exit status ").append(process.exitValue());
          stderrThread.join(TimeUnit.SECONDS.toMillis(EXIT_WAIT_SECONDS));
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      synchronized (stderrTail) {
        if (!stderrTail.isEmpty()) {
          out.append(":\n").append(String.join("\n", stderrTail));
        }
      }
      return out.toString();
    }

    /** Closes the child's input: it finishes what it is running and exits. */
    void stop() {
      synchronized (stdin) {
        closed = true;
        try {
          stdin.close();
        } catch (IOException e) {
          LOG.debug("Manifest committer engine {}: closing its input failed", process.pid(), e);
        }
      }
      try {
        if (!process.waitFor(EXIT_WAIT_SECONDS, TimeUnit.SECONDS)) {
          LOG.warn("Manifest committer engine {} still runs {} s after its input closed",
              process.pid(), EXIT_WAIT_SECONDS);
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }

    @Override
    public String toString() {
      return "pid " + process.pid();
    }
  }
}
