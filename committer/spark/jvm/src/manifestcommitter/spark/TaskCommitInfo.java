package manifestcommitter.spark;

import java.io.Serializable;
import java.util.List;

/**
 * What a committed task attempt reports to the driver (Spark's {@code TaskCommitMessage}): which
 * attempt committed and where its manifest is, so job commit can refuse any other attempt's.
 */
public final class TaskCommitInfo implements Serializable {
  private static final long serialVersionUID = 2L;

  private final String taskId;
  private final String taskAttemptId;
  private final String manifestPath;
  private final long fileCount;
  private final long byteCount;
  /** Absolute directories (custom partition locations) the attempt wrote into, as URIs. */
  private final List<String> absoluteDirectories;

  public TaskCommitInfo(String taskId, String taskAttemptId, String manifestPath, long fileCount,
      long byteCount, List<String> absoluteDirectories) {
    this.taskId = taskId;
    this.taskAttemptId = taskAttemptId;
    this.manifestPath = manifestPath;
    this.fileCount = fileCount;
    this.byteCount = byteCount;
    this.absoluteDirectories = List.copyOf(absoluteDirectories);
  }

  public String getTaskId() {
    return taskId;
  }

  public String getTaskAttemptId() {
    return taskAttemptId;
  }

  public String getManifestPath() {
    return manifestPath;
  }

  public long getFileCount() {
    return fileCount;
  }

  public long getByteCount() {
    return byteCount;
  }

  public List<String> getAbsoluteDirectories() {
    return absoluteDirectories;
  }

  @Override
  public String toString() {
    return "TaskCommitInfo{" + taskAttemptId + ", files=" + fileCount + ", bytes=" + byteCount
        + ", manifest=" + manifestPath + "}";
  }
}
