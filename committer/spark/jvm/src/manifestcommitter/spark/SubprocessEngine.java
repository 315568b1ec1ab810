package manifestcommitter.spark;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * Runs the Python engine as {@code python -m committer.spark.driver}: the request on standard
 * input, the response on standard output.
 *
 * <p>The request carries configuration and credentials ({@code fs.*} keys), so it never goes on
 * the command line, where other local users could read it from the process table.
 */
final class SubprocessEngine implements JobCommitEngine {
  static final String MODULE = "committer.spark.driver";
  private static final int STDERR_TAIL_CHARS = 4000;

  private final List<String> command;
  private final String pythonPath;

  SubprocessEngine(String python, String pythonPath) {
    this.command = List.of(python, "-m", MODULE);
    this.pythonPath = pythonPath;
  }

  List<String> command() {
    return command;
  }

  @Override
  public String setupJob(String requestJson) {
    return run(requestJson);
  }

  @Override
  public String commitJob(String requestJson) {
    return run(requestJson);
  }

  @Override
  public String abortJob(String requestJson) {
    return run(requestJson);
  }

  @Override
  public String deleteWithJob(String requestJson) {
    return run(requestJson);
  }

  private String run(String requestJson) {
    ProcessBuilder pb = new ProcessBuilder(new ArrayList<>(command));
    if (pythonPath != null && !pythonPath.isEmpty()) {
      Map<String, String> env = pb.environment();
      String existing = env.get("PYTHONPATH");
      env.put("PYTHONPATH",
          existing == null || existing.isEmpty()
              ? pythonPath : pythonPath + java.io.File.pathSeparator + existing);
    }
    Process process;
    try {
      process = pb.start();
    } catch (IOException e) {
      return EngineClient.errorResponse(
          "could not start the Python engine " + command + ": " + e.getMessage()
              + " (set spark.manifest.committer.python or spark.pyspark.driver.python to a"
              + " Python that has spark-manifest-committer installed)",
          "EngineStartError");
    }
    // Drain stderr on its own thread so a chatty engine cannot fill the pipe and deadlock.
    ByteArrayOutputStream stderr = new ByteArrayOutputStream();
    Thread drain = new Thread(() -> copy(process.getErrorStream(), stderr),
        "manifest-committer-engine-stderr");
    drain.setDaemon(true);
    drain.start();
    ByteArrayOutputStream stdout = new ByteArrayOutputStream();
    try {
      try (OutputStream in = process.getOutputStream()) {
        in.write(requestJson.getBytes(StandardCharsets.UTF_8));
      }
      copy(process.getInputStream(), stdout);
      int exit = process.waitFor();
      drain.join();
      String out = stdout.toString(StandardCharsets.UTF_8).trim();
      String err = tail(stderr.toString(StandardCharsets.UTF_8));
      if (exit == 0) {
        return out;
      }
      // The engine prints a structured error response even when it exits non-zero; prefer it.
      Optional<String> structured = EngineClient.errorMessageOf(out);
      String message = structured.orElse(
          "Python engine exited with status " + exit + (err.isEmpty() ? "" : ":\n" + err));
      return EngineClient.errorResponse(message, "EngineProcessError");
    } catch (IOException e) {
      process.destroyForcibly();
      return EngineClient.errorResponse(
          "I/O error talking to the Python engine: " + e.getMessage()
              + (stderr.size() > 0 ? "\n" + tail(stderr.toString(StandardCharsets.UTF_8)) : ""),
          "EngineProcessError");
    } catch (InterruptedException e) {
      process.destroyForcibly();
      Thread.currentThread().interrupt();
      return EngineClient.errorResponse("interrupted waiting for the Python engine",
          "EngineProcessError");
    }
  }

  private static void copy(InputStream in, ByteArrayOutputStream out) {
    byte[] buf = new byte[8192];
    try (InputStream stream = in) {
      int n;
      while ((n = stream.read(buf)) > 0) {
        synchronized (out) {
          out.write(buf, 0, n);
        }
      }
    } catch (IOException e) {
      // The process died; whatever was read so far is all the diagnostics there are.
    }
  }

  private static String tail(String text) {
    String trimmed = text.trim();
    return trimmed.length() <= STDERR_TAIL_CHARS
        ? trimmed : "..." + trimmed.substring(trimmed.length() - STDERR_TAIL_CHARS);
  }
}
