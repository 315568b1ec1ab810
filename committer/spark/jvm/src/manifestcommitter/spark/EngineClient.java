package manifestcommitter.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** Chooses the engine transport for a job and turns engine responses into results or errors. */
final class EngineClient {
  static final String ENGINE_KEY = "spark.manifest.committer.engine";
  static final String PYTHON_KEY = "spark.manifest.committer.python";
  static final String PYTHONPATH_KEY = "spark.manifest.committer.pythonpath";

  /**
   * The configuration keys the engine reads (without Spark's {@code spark.hadoop.}), as
   * prefixes: the committer's options, and the store keys it turns into credentials and
   * endpoints. Nothing else is sent: a request stays small (the Py4J callback slows down sharply
   * beyond 8 KiB) and carries no secret the engine does not use. Kept equal to
   * {@code committer.spark.engine.CONF_KEY_PREFIXES}; a test compares them.
   */
  static final String[] FORWARDED_PREFIXES = {
    "mapreduce.manifest.committer.",
    "mapreduce.fileoutputcommitter.cleanup.skipped",
    "mapreduce.fileoutputcommitter.marksuccessfuljobs",
    "fs.azure.account.key",
    "fs.azure.sas.fixed.token",
    "fs.azure.account.oauth2.client.",
    "fs.azure.blob.endpoint",
    "fs.azure.io.rate.limit",
    "google.cloud.auth.service.account.json.keyfile",
    "fs.gs.auth.service.account.json.keyfile",
    "fs.gs.storage.root.url",
    "fs.gs.project.id",
  };

  private static final Logger LOG = LoggerFactory.getLogger(EngineClient.class);
  private static final ObjectMapper JSON = new ObjectMapper();

  private final JobCommitEngine engine;
  private final String description;

  private EngineClient(JobCommitEngine engine, String description) {
    this.engine = engine;
    this.description = description;
  }

  String description() {
    return description;
  }

  /**
   * {@code auto} (default) uses the engine the PySpark driver registered and otherwise starts a
   * Python subprocess; {@code inprocess} fails if none is registered; {@code subprocess} always
   * starts one (a driver that is not a PySpark process, {@code spark-sql}, Spark Connect).
   */
  static EngineClient forJob(Configuration conf) throws IOException {
    String mode = conf.get(ENGINE_KEY, sparkConf(ENGINE_KEY).orElse("auto"))
        .trim().toLowerCase(Locale.ROOT);
    JobCommitEngine registered = EngineRegistry.get();
    switch (mode) {
      case "auto":
        if (registered != null) {
          return new EngineClient(registered, "in-process (Py4J)");
        }
        return subprocess(conf);
      case "inprocess":
        if (registered == null) {
          throw new IOException(ENGINE_KEY + "=inprocess but no Python engine is registered"
              + " in this JVM: create the session with committer.spark.configure(builder)");
        }
        return new EngineClient(registered, "in-process (Py4J)");
      case "subprocess":
        return subprocess(conf);
      default:
        throw new IOException("unknown " + ENGINE_KEY + " value '" + mode
            + "'; expected auto, inprocess or subprocess");
    }
  }

  private static EngineClient subprocess(Configuration conf) {
    String python = firstNonEmpty(
        conf.get(PYTHON_KEY),
        sparkConf(PYTHON_KEY).orElse(null),
        sparkConf("spark.pyspark.driver.python").orElse(null),
        sparkConf("spark.pyspark.python").orElse(null),
        System.getenv("PYSPARK_DRIVER_PYTHON"),
        System.getenv("PYSPARK_PYTHON"),
        "python3");
    String pythonPath = firstNonEmpty(conf.get(PYTHONPATH_KEY),
        sparkConf(PYTHONPATH_KEY).orElse(null), "");
    SubprocessEngine engine = SubprocessEngine.forInterpreter(python, pythonPath);
    return new EngineClient(engine, "subprocess " + engine.command());
  }

  private static Optional<String> sparkConf(String key) {
    SparkEnv env = SparkEnv.get();
    if (env == null) {
      return Optional.empty();
    }
    SparkConf conf = env.conf();
    return conf.contains(key) ? Optional.of(conf.get(key)) : Optional.empty();
  }

  private static String firstNonEmpty(String... values) {
    for (String v : values) {
      if (v != null && !v.trim().isEmpty()) {
        return v.trim();
      }
    }
    return "";
  }

  /** The forwarded subset of {@code conf}, with and without Spark's {@code spark.hadoop.}. */
  static Map<String, String> forwardedConf(Configuration conf) {
    Map<String, String> out = new LinkedHashMap<>();
    for (Map.Entry<String, String> e : conf) {
      String key = e.getKey();
      String bare = key.startsWith("spark.hadoop.") ? key.substring("spark.hadoop.".length()) : key;
      for (String prefix : FORWARDED_PREFIXES) {
        if (bare.startsWith(prefix)) {
          // Resolve ${var} substitutions as Hadoop would for the JVM's own readers.
          out.put(key, conf.get(key));
          break;
        }
      }
    }
    return out;
  }

  JsonNode setupJob(Map<String, Object> request) throws IOException {
    return call("setupJob", request);
  }

  JsonNode commitJob(Map<String, Object> request) throws IOException {
    return call("commitJob", request);
  }

  JsonNode abortJob(Map<String, Object> request) throws IOException {
    return call("abortJob", request);
  }

  JsonNode deleteWithJob(Map<String, Object> request) throws IOException {
    return call("deleteWithJob", request);
  }

  /**
   * UTF-8 bytes of one Py4J call's argument, with room for Py4J's escaping and command: a
   * callback command beyond 8 KiB leaves the JVM in two writes, and the second waits for the
   * acknowledgement of the first, which Python's side delays by ~40 ms.
   */
  static final int MAX_PART_BYTES = 6000;

  /**
   * {@code json} cut into pieces of at most {@link #MAX_PART_BYTES} bytes once encoded and
   * escaped, never inside a surrogate pair.
   */
  static List<String> pieces(String json) {
    List<String> out = new ArrayList<>();
    int start = 0;
    int bytes = 0;
    for (int i = 0; i < json.length(); i++) {
      char c = json.charAt(i);
      int size = c < 0x80 ? (c == '\\' || c == '\n' || c == '\r' ? 2 : 1) : c < 0x800 ? 2 : 3;
      if (bytes + size > MAX_PART_BYTES && !Character.isLowSurrogate(c)) {
        out.add(json.substring(start, i));
        start = i;
        bytes = 0;
      }
      bytes += size;
    }
    out.add(json.substring(start));
    return out;
  }

  private JsonNode call(String operation, Map<String, Object> request) throws IOException {
    Map<String, Object> doc = new LinkedHashMap<>();
    doc.put("operation", operation);
    doc.putAll(request);
    String json = JSON.writeValueAsString(doc);
    String response;
    try {
      if (!(engine instanceof SubprocessEngine) && json.length() > MAX_PART_BYTES / 3) {
        List<String> parts = pieces(json);
        if (parts.size() > 1) {
          String id = UUID.randomUUID().toString();
          for (String part : parts) {
            engine.requestPart(id, part);
          }
          Map<String, Object> ref = new LinkedHashMap<>();
          ref.put("operation", operation);
          ref.put("requestParts", id);
          json = JSON.writeValueAsString(ref);
        }
      }
      switch (operation) {
        case "setupJob":
          response = engine.setupJob(json);
          break;
        case "commitJob":
          response = engine.commitJob(json);
          break;
        case "deleteWithJob":
          response = engine.deleteWithJob(json);
          break;
        default:
          response = engine.abortJob(json);
          break;
      }
    } catch (RuntimeException e) {
      // A Py4J failure (Python side gone, callback server down) arrives as a runtime exception.
      throw new IOException("manifest committer engine " + description + " failed in "
          + operation + ": " + e.getMessage(), e);
    }
    if (response == null || response.isEmpty()) {
      throw new IOException("manifest committer engine " + description
          + " returned no response to " + operation);
    }
    JsonNode node;
    try {
      node = JSON.readTree(response);
    } catch (IOException e) {
      throw new IOException("manifest committer engine " + description
          + " returned a malformed response to " + operation + ": " + abbreviate(response), e);
    }
    if (!node.path("ok").asBoolean(false)) {
      String type = node.path("errorType").asText("error");
      String message = node.path("error").asText("(no message)");
      throw new EngineException(operation + " failed (" + type + "): " + message);
    }
    LOG.debug("Engine {} completed {}", description, operation);
    return node.path("result");
  }

  /** The message of an error response, if {@code json} is one. */
  static Optional<String> errorMessageOf(String json) {
    try {
      JsonNode node = JSON.readTree(json);
      if (node != null && node.has("ok") && !node.path("ok").asBoolean(true)) {
        return Optional.of(node.path("error").asText());
      }
    } catch (IOException e) {
      // Not JSON: the caller falls back to standard error.
    }
    return Optional.empty();
  }

  static String errorResponse(String message, String type) {
    Map<String, Object> doc = new LinkedHashMap<>();
    doc.put("ok", false);
    doc.put("error", message);
    doc.put("errorType", type);
    try {
      return JSON.writeValueAsString(doc);
    } catch (IOException e) {
      throw new IllegalStateException("cannot serialize an error response", e);
    }
  }

  private static String abbreviate(String s) {
    return s.length() <= 500 ? s : s.substring(0, 500) + "...";
  }

  /** An error reported by the engine itself; its message is the engine's, unchanged. */
  static final class EngineException extends IOException {
    private static final long serialVersionUID = 1L;

    EngineException(String message) {
      super(message);
    }
  }
}
