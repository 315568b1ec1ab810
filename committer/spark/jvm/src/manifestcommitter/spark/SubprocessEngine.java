package manifestcommitter.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The Python engine as one long-lived child process per driver JVM and interpreter:
 * {@code python -m committer.spark.driver --serve}, started by the first request and shared by
 * every later job, concurrent ones included.
 *
 * <p>The channel is the child's own pipes: one request per line on its standard input
 * ({@code {"id":n,"request":{...}}}), one response per line on its standard output, in any
 * order. Requests carry configuration and credentials ({@code fs.*} keys), so they never go on
 * the command line or in the child's environment. A child that died is replaced by the next
 * request; a request that could not be written is sent to the replacement, one that was
 * written fails (it may have run). The child stops when its standard input closes: at JVM exit
 * (a shutdown hook closes it) or when the JVM is killed (the kernel does).
 */
final class SubprocessEngine implements JobCommitEngine {
  static final String MODULE = "committer.spark.driver";
  private static final Logger LOG = LoggerFactory.getLogger(SubprocessEngine.class);
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final long START_TIMEOUT_SECONDS = 300;
  private static final long EXIT_WAIT_SECONDS = 10;
  private static final Map<List<String>, SubprocessEngine> ENGINES = new ConcurrentHashMap<>();

  static {
    Thread hook = new Thread(SubprocessEngine::stopAll, "manifest-committer-engine-shutdown");
    Runtime.getRuntime().addShutdownHook(hook);
  }

  private final List<String> command;
  private final String pythonPath;
  private EngineProcess current;  // guarded by this

  private SubprocessEngine(String python, String pythonPath) {
    this.command = List.of(python, "-m", MODULE, "--serve");
    this.pythonPath = pythonPath;
  }

  /** The engine of this JVM for {@code python} with {@code pythonPath}. */
  static SubprocessEngine forInterpreter(String python, String pythonPath) {
    List<String> key = List.of(python, pythonPath == null ? "" : pythonPath);
    return ENGINES.computeIfAbsent(key, k -> new SubprocessEngine(k.get(0), k.get(1)));
  }

  List<String> command() {
    return command;
  }

  @Override
  public String setupJob(String requestJson) {
    return call(requestJson);
  }

  @Override
  public String commitJob(String requestJson) {
    return call(requestJson);
  }

  @Override
  public String abortJob(String requestJson) {
    return call(requestJson);
  }

  @Override
  public String deleteWithJob(String requestJson) {
    return call(requestJson);
  }

  @Override
  public String requestPart(String requestId, String part) {
    throw new UnsupportedOperationException("requests reach the subprocess engine whole");
  }

  private String call(String requestJson) {
    for (int attempt = 0; ; attempt++) {
      EngineProcess process;
      try {
        process = running();
      } catch (EngineFailure e) {
        return EngineClient.errorResponse(e.getMessage(), "EngineStartError");
      }
      try {
        return process.call(requestJson);
      } catch (NotSent e) {
        // The child was gone before it could read the request: a fresh one may safely run it.
        if (attempt > 0) {
          return EngineClient.errorResponse(e.getMessage(), "EngineProcessError");
        }
        LOG.warn("Manifest committer engine {} was gone; starting a new one", process);
      } catch (EngineFailure e) {
        return EngineClient.errorResponse(e.getMessage(), "EngineProcessError");
      }
    }
  }

  private synchronized EngineProcess running() throws EngineFailure {
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

  private static void stopAll() {
    for (SubprocessEngine engine : ENGINES.values()) {
      engine.stop();
    }
  }

  /** A failure to start or talk to the child; the message is for the Spark job's error. */
  static class EngineFailure extends Exception {
    private static final long serialVersionUID = 1L;

    EngineFailure(String message) {
      super(message);
    }
  }

  /** The request never reached the child. */
  static final class NotSent extends EngineFailure {
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
    private final CompletableFuture<Void> ready = new CompletableFuture<>();
    private final AtomicLong ids = new AtomicLong();
    private final Deque<String> stderrTail = new ArrayDeque<>();
    private final Thread stderrThread;
    private volatile boolean closed;

    private EngineProcess(Process process) {
      this.process = process;
      this.stdin = process.getOutputStream();
      Thread reader = new Thread(this::readResponses,
          "manifest-committer-engine-" + process.pid() + "-out");
      reader.setDaemon(true);
      stderrThread = new Thread(this::readLog,
          "manifest-committer-engine-" + process.pid() + "-err");
      stderrThread.setDaemon(true);
      // The log reader first: the response reader, at the child's end, joins it to put the
      // log's tail in the failure (joining a thread not yet started would return at once).
      stderrThread.start();
      reader.start();
    }

    static EngineProcess start(List<String> command, String pythonPath) throws EngineFailure {
      ProcessBuilder pb = new ProcessBuilder(new ArrayList<>(command));
      if (pythonPath != null && !pythonPath.isEmpty()) {
        Map<String, String> env = pb.environment();
        String existing = env.get("PYTHONPATH");
        env.put("PYTHONPATH", existing == null || existing.isEmpty()
            ? pythonPath : pythonPath + java.io.File.pathSeparator + existing);
      }
      Process process;
      try {
        process = pb.start();
      } catch (IOException e) {
        throw new EngineFailure("could not start the Python engine " + command + ": "
            + e.getMessage() + " (set spark.manifest.committer.python or"
            + " spark.pyspark.driver.python to a Python that has spark-manifest-committer"
            + " installed)");
      }
      EngineProcess engine = new EngineProcess(process);
      try {
        engine.ready.get(START_TIMEOUT_SECONDS, TimeUnit.SECONDS);
      } catch (ExecutionException e) {
        process.destroyForcibly();
        throw new EngineFailure("the Python engine " + command + " did not start: "
            + e.getCause().getMessage());
      } catch (TimeoutException e) {
        process.destroyForcibly();
        throw new EngineFailure("the Python engine " + command + " did not start within "
            + START_TIMEOUT_SECONDS + " s" + engine.exitDescription());
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        process.destroyForcibly();
        throw new EngineFailure("interrupted starting the Python engine");
      }
      LOG.info("Manifest committer engine started: pid {}, {}", process.pid(), command);
      return engine;
    }

    boolean alive() {
      return !closed && process.isAlive();
    }

    String call(String requestJson) throws EngineFailure {
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
        throw new EngineFailure(e.getCause().getMessage());
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        pending.remove(id);
        // The engine still runs the request to its end; only this thread stops waiting.
        throw new EngineFailure("interrupted waiting for the Python engine (pid "
            + process.pid() + ")");
      }
    }

    private void readResponses() {
      try (BufferedReader out = new BufferedReader(
          new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
        String line;
        while ((line = out.readLine()) != null) {
          deliver(line);
        }
      } catch (IOException e) {
        LOG.debug("Manifest committer engine {}: reading its output failed", process.pid(), e);
      }
      closed = true;
      String why = "the Python engine (pid " + process.pid() + ") exited before answering"
          + exitDescription();
      ready.completeExceptionally(new EngineFailure(why));
      for (Long id : new ArrayList<>(pending.keySet())) {
        CompletableFuture<String> f = pending.remove(id);
        if (f != null) {
          f.completeExceptionally(new EngineFailure(why));
        }
      }
    }

    private void deliver(String line) {
      JsonNode doc;
      try {
        doc = JSON.readTree(line);
      } catch (IOException e) {
        LOG.warn("Manifest committer engine {}: unreadable output line: {}", process.pid(),
            line.length() > 200 ? line.substring(0, 200) + "..." : line);
        return;
      }
      if (doc.path("ready").asBoolean(false)) {
        ready.complete(null);
        return;
      }
      CompletableFuture<String> f = pending.remove(doc.path("id").asLong(-1));
      if (f == null) {
        LOG.warn("Manifest committer engine {}: answer to no request ({})", process.pid(),
            doc.path("id"));
        return;
      }
      try {
        f.complete(JSON.writeValueAsString(doc.path("response")));
      } catch (IOException e) {
        f.completeExceptionally(new EngineFailure("cannot re-serialize the engine's response"));
      }
    }

    /** The child's log goes to the driver's log, and its tail into failure messages. */
    private void readLog() {
      try (BufferedReader err = new BufferedReader(
          new InputStreamReader(process.getErrorStream(), StandardCharsets.UTF_8))) {
        String line;
        while ((line = err.readLine()) != null) {
          LOG.info("engine {}: {}", process.pid(), line);
          synchronized (stderrTail) {
            stderrTail.addLast(line);
            if (stderrTail.size() > STDERR_TAIL_LINES) {
              stderrTail.removeFirst();
            }
          }
        }
      } catch (IOException e) {
        LOG.debug("Manifest committer engine {}: reading its log failed", process.pid(), e);
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
