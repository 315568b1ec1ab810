package manifestcommitter.spark;

/**
 * The driver-side job operations, implemented by the Python engine.
 *
 * <p>Every method takes one JSON request document and returns one JSON response document:
 * {@code {"ok": true, "result": {...}}} or {@code {"ok": false, "error": "...", "errorType": "..."}}.
 * Plain strings keep the contract identical for the two transports (a Py4J callback into the
 * PySpark driver, or a Python subprocess reading standard input), and keep Py4J from having to
 * proxy Java collections back into Python.
 */
public interface JobCommitEngine {
  String setupJob(String requestJson);

  String commitJob(String requestJson);

  String abortJob(String requestJson);

  /**
   * Static overwrite: move the path Spark's {@code deleteWithJob} names into the job's directory
   * instead of deleting it. The result carries {@code "moved": true|false} (false: nothing there).
   */
  String deleteWithJob(String requestJson);

  /**
   * One piece of a request too large for a single Py4J call (beyond 8 KiB a callback waits
   * ~40 ms for a delayed TCP acknowledgement): the pieces of request {@code requestId} arrive
   * in order, then the operation is called with {@code {"requestParts": requestId}}. Returns an
   * empty string. The subprocess engine, whose channel is a pipe, is never sent pieces.
   */
  String requestPart(String requestId, String part);
}
