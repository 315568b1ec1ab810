package manifestcommitter.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * What a committed task attempt reports to the driver (Spark's {@code TaskCommitMessage}): which
 * attempt committed and where its manifest is, so job commit can refuse any other attempt's.
 */
public final class TaskCommitInfo implements Serializable {
  private static final long serialVersionUID = 1L;

  private final String taskId;
  private final String taskAttemptId;
  private final String manifestPath;
  private final long fileCount;
  private final long byteCount;
  /** Partition directories (relative, escaped as Spark names them) the attempt wrote into. */
  private final List<String> partitions;
  /** Absolute directories (custom partition locations) the attempt wrote into, as URIs. */
  private final List<String> absoluteDirectories;

  public TaskCommitInfo(String taskId, String taskAttemptId, String manifestPath, long fileCount,
      long byteCount, List<String> partitions, List<String> absoluteDirectories) {
    this.taskId = taskId;
    this.taskAttemptId = taskAttemptId;
    this.manifestPath = manifestPath;
    this.fileCount = fileCount;
    this.byteCount = byteCount;
    this.partitions = Collections.unmodifiableList(new ArrayList<>(partitions));
    this.absoluteDirectories = Collections.unmodifiableList(new ArrayList<>(absoluteDirectories));
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

  public List<String> getPartitions() {
    return partitions;
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
