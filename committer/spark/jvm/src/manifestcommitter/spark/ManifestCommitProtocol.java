package manifestcommitter.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.net.URI;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.JobContext;
import org.apache.hadoop.mapreduce.OutputCommitter;
import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.spark.internal.io.FileCommitProtocol;
import org.apache.spark.internal.io.FileNameSpec;
import org.apache.spark.mapred.SparkHadoopMapRedUtil;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.Option;

/**
 * Spark commit protocol ({@code spark.sql.sources.commitProtocolClass}) of the manifest committer.
 *
 * <p>Executors write each task attempt's files under
 * {@code <dest>/_temporary/manifest_<jobId>/00/tasks/<taskAttemptId>/} and, at task commit, save
 * a Hadoop TaskManifest/1 listing them. The driver's job setup, commit and abort are done by the
 * Python engine (see {@link EngineClient}); this class only names files, scans and reports.
 */
public class ManifestCommitProtocol extends FileCommitProtocol implements Serializable {
  private static final long serialVersionUID = 1L;
  private static final Logger LOG = LoggerFactory.getLogger(ManifestCommitProtocol.class);

  /** Job attempt number: Spark never recovers a job attempt, it always starts at 0. */
  static final int JOB_ATTEMPT = 0;
  static final String TEMPORARY_DIR = "_temporary";
  static final String JOB_DIR_PREFIX = "manifest_";
  static final String TASKS_DIR = "tasks";
  static final String MANIFESTS_DIR = "manifests";
  static final String MANIFEST_SUFFIX = "-manifest.json";
  static final String TMP_SUFFIX = ".tmp";
  /**
   * Created by the engine's job setup, deleted first by its cleanup: a task attempt that finds
   * it missing belongs to a job that is over (committed or aborted).
   */
  static final String JOB_MARKER = "_job.json";
  /**
   * Subdirectory of a task attempt directory holding files bound for custom partition locations
   * ({@code newTaskTempFileAbsPath}). Spark's partition directories always contain '=', so this
   * name cannot collide with one.
   */
  static final String ABSOLUTE_SUBDIR = "_custom_locations";
  /** The session class: Spark 4's classic one, else Spark 3.5's. */
  private static final String[] SESSION_CLASSES = {
    "org.apache.spark.sql.classic.SparkSession", "org.apache.spark.sql.SparkSession"};

  private final String jobId;
  private final String path;
  private final boolean dynamicPartitionOverwrite;

  // Per-task state on the executor. Spark creates a fresh protocol copy for every task by
  // deserialization, so these never mix tasks; they are not needed on the driver.
  private transient Set<String> partitionPaths;
  private transient List<Path> absoluteDirs;

  public ManifestCommitProtocol(String jobId, String path, boolean dynamicPartitionOverwrite) {
    this.jobId = jobId;
    this.path = path;
    this.dynamicPartitionOverwrite = dynamicPartitionOverwrite;
  }

  public ManifestCommitProtocol(String jobId, String path) {
    this(jobId, path, false);
  }

  // ---------------------------------------------------------------- layout

  Path destination() {
    return new Path(path);
  }

  Path jobAttemptDir() {
    Path jobDir = new Path(new Path(destination(), TEMPORARY_DIR), JOB_DIR_PREFIX + jobId);
    return new Path(jobDir, String.format("%02d", JOB_ATTEMPT));
  }

  Path taskAttemptDir(TaskAttemptContext ctx) {
    return new Path(new Path(jobAttemptDir(), TASKS_DIR), ctx.getTaskAttemptID().toString());
  }

  Path manifestPath(TaskAttemptContext ctx) {
    return new Path(new Path(jobAttemptDir(), MANIFESTS_DIR),
        ctx.getTaskAttemptID().getTaskID().toString() + MANIFEST_SUFFIX);
  }

  Path temporaryManifestPath(TaskAttemptContext ctx) {
    return new Path(new Path(jobAttemptDir(), MANIFESTS_DIR),
        ctx.getTaskAttemptID().toString() + MANIFEST_SUFFIX + TMP_SUFFIX);
  }

  /** Spark's own naming: a retried task writes the same name into its own attempt directory. */
  String fileName(TaskAttemptContext ctx, FileNameSpec spec) {
    int split = ctx.getTaskAttemptID().getTaskID().getId();
    return String.format("%spart-%05d-%s%s", spec.prefix(), split, jobId, spec.suffix());
  }

  // ---------------------------------------------------------------- job (driver)

  /**
   * {@code path} with scheme and authority: a schemeless URI string would be ambiguous to the
   * engine (is "%20" an escape or a name?), a qualified one never is.
   */
  static Path qualified(Path path, Configuration conf) throws IOException {
    return path.getFileSystem(conf).makeQualified(path);
  }

  private Map<String, Object> request(Configuration conf) throws IOException {
    Map<String, Object> req = new LinkedHashMap<>();
    req.put("jobId", jobId);
    req.put("jobAttempt", JOB_ATTEMPT);
    // The qualified Hadoop URI string, which the engine decodes exactly once (HADOOP-17112).
    req.put("destinationUri", qualified(destination(), conf).toUri().toString());
    req.put("dynamicPartitionOverwrite", dynamicPartitionOverwrite);
    req.put("conf", EngineClient.forwardedConf(conf));
    return req;
  }

  @Override
  public void setupJob(JobContext jobContext) {
    Configuration conf = jobContext.getConfiguration();
    try {
      EngineClient engine = EngineClient.forJob(conf);
      LOG.info("Manifest committer job {} at {}: engine {}", jobId, path, engine.description());
      engine.setupJob(request(conf));
    } catch (IOException e) {
      throw new UncheckedIOException("manifest committer: setting up job " + jobId + " failed: "
          + e.getMessage(), e);
    }
  }

  /**
   * Job commit on Spark 4 (Scala 2.13, where Spark's {@code Seq} is the immutable one). Neither
   * overload says {@code @Override}: compiled against one Scala line, the other is a plain
   * overload, so one source serves both and each jar overrides the method its Spark calls.
   */
  public void commitJob(JobContext jobContext,
      scala.collection.immutable.Seq<FileCommitProtocol.TaskCommitMessage> messages) {
    commitTasks(jobContext, messages.iterator());
  }

  /** Job commit on Spark 3.5 (Scala 2.12, where Spark's {@code Seq} is scala.collection's). */
  public void commitJob(JobContext jobContext,
      scala.collection.Seq<FileCommitProtocol.TaskCommitMessage> messages) {
    commitTasks(jobContext, messages.iterator());
  }

  private void commitTasks(JobContext jobContext,
      scala.collection.Iterator<FileCommitProtocol.TaskCommitMessage> messages) {
    Configuration conf = jobContext.getConfiguration();
    List<Map<String, Object>> committed = new ArrayList<>();
    Set<String> absoluteRoots = new LinkedHashSet<>();
    long files = 0;
    long bytes = 0;
    while (messages.hasNext()) {
      TaskCommitInfo info = (TaskCommitInfo) messages.next().obj();
      Map<String, Object> task = new LinkedHashMap<>();
      task.put("taskId", info.getTaskId());
      task.put("taskAttemptId", info.getTaskAttemptId());
      committed.add(task);
      absoluteRoots.addAll(info.getAbsoluteDirectories());
      files += info.getFileCount();
      bytes += info.getByteCount();
    }
    try {
      Map<String, Object> req = request(conf);
      req.put("committedTasks", committed);
      req.put("extraDestinationRoots", new ArrayList<>(absoluteRoots));
      EngineClient engine = EngineClient.forJob(conf);
      long start = System.nanoTime();
      JsonNode result = engine.commitJob(req);
      LOG.info("Manifest committer job {} committed {} tasks, {} files, {} bytes in {} ms via {}"
              + " ({})", jobId, committed.size(), files, bytes,
          (System.nanoTime() - start) / 1_000_000, engine.description(),
          result.path("summary").isMissingNode() ? "no summary" : "summary written");
    } catch (IOException e) {
      // Spark calls abortJob after this; the message is the engine's, so the user sees why.
      throw new UncheckedIOException("manifest committer: committing job " + jobId + " to "
          + path + " failed: " + e.getMessage(), e);
    }
  }

  /**
   * Static overwrite ({@code mode("overwrite")}, {@code INSERT OVERWRITE ... PARTITION}): Spark
   * calls this for the table or the static partitions before {@code setupJob}. A path on the
   * destination's filesystem is not deleted but moved into the job's directory by the engine,
   * so a job that fails or is aborted gets it back; the commit deletes it after {@code _SUCCESS}.
   * A path on another filesystem is deleted, as Spark's own protocol does.
   *
   * @return true if something was there (and is now moved aside or deleted)
   */
  @Override
  public boolean deleteWithJob(FileSystem fs, Path target, boolean recursive) {
    Configuration conf = driverConfiguration(fs);
    try {
      Path qualifiedTarget = fs.makeQualified(target);
      Path dest = qualified(destination(), conf);
      if (!sameFileSystem(dest.toUri(), qualifiedTarget.toUri())) {
        LOG.info("Manifest committer job {}: deleting {} (not on the destination's filesystem)",
            jobId, qualifiedTarget);
        return fs.delete(target, recursive);
      }
      if (!recursive) {
        FileStatus status;
        try {
          status = fs.getFileStatus(qualifiedTarget);
        } catch (FileNotFoundException e) {
          return false;
        }
        if (status.isDirectory() && fs.listStatus(qualifiedTarget).length > 0) {
          // A non-recursive delete of a non-empty directory fails; let the filesystem say so.
          return fs.delete(target, false);
        }
      }
      Map<String, Object> req = request(conf);
      req.put("path", qualifiedTarget.toUri().toString());
      EngineClient engine = EngineClient.forJob(conf);
      JsonNode result = engine.deleteWithJob(req);
      boolean moved = result.path("moved").asBoolean(false);
      LOG.info("Manifest committer job {}: {} {} into the job directory (static overwrite)",
          jobId, moved ? "moved" : "nothing to move at", qualifiedTarget);
      return moved;
    } catch (IOException e) {
      throw new UncheckedIOException("manifest committer: job " + jobId + " could not replace "
          + target + ": " + e.getMessage(), e);
    }
  }

  /**
   * The session's Hadoop configuration (with runtime {@code spark.hadoop.*} options, as
   * {@code setupJob} sees them), falling back to the filesystem's own. Looked up by reflection:
   * the session class is {@code org.apache.spark.sql.classic.SparkSession} on Spark 4 and
   * {@code org.apache.spark.sql.SparkSession} on Spark 3.5, and one source serves both.
   */
  private static Configuration driverConfiguration(FileSystem fs) {
    for (String name : SESSION_CLASSES) {
      try {
        Class<?> sessions = Class.forName(name);
        Option<?> session = (Option<?>) sessions.getMethod("getActiveSession").invoke(null);
        if (session.isEmpty()) {
          session = (Option<?>) sessions.getMethod("getDefaultSession").invoke(null);
        }
        if (session.isEmpty()) {
          break;
        }
        Object state = session.get().getClass().getMethod("sessionState").invoke(session.get());
        return (Configuration) state.getClass().getMethod("newHadoopConf").invoke(state);
      } catch (ClassNotFoundException e) {
        // Spark 3.5: the next name.
      } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
        LOG.debug("No active session configuration; using the filesystem's", e);
        break;
      }
    }
    return fs.getConf();
  }

  static boolean sameFileSystem(URI a, URI b) {
    return a.getScheme() != null && a.getScheme().equalsIgnoreCase(b.getScheme())
        && Objects.equals(a.getAuthority(), b.getAuthority());
  }

  @Override
  public void abortJob(JobContext jobContext) {
    // Never throw: Spark calls this while handling the original failure, which must surface.
    try {
      Configuration conf = jobContext.getConfiguration();
      EngineClient.forJob(conf).abortJob(request(conf));
    } catch (IOException | RuntimeException e) {
      LOG.error("Manifest committer: aborting job {} at {} failed; its directory {} may remain",
          jobId, path, jobAttemptDir().getParent(), e);
    }
  }

  // ---------------------------------------------------------------- task (executor)

  @Override
  public void setupTask(TaskAttemptContext ctx) {
    partitionPaths = new LinkedHashSet<>();
    absoluteDirs = new ArrayList<>();
    Path dir = taskAttemptDir(ctx);
    try {
      FileSystem fs = dir.getFileSystem(ctx.getConfiguration());
      // A task of a failed stage may still start after the driver aborted the job; it must not
      // recreate the job's directory (mkdirs creates every parent).
      requireJob(fs, ctx, "set up");
      if (!fs.mkdirs(dir)) {
        throw new IOException("mkdirs returned false for " + dir);
      }
    } catch (IOException e) {
      throw new UncheckedIOException("manifest committer: task attempt directory " + dir
          + " could not be created: " + e.getMessage(), e);
    }
  }

  private void ensureTaskState() {
    // Spark always calls setupTask first; this guards callers (tests, tools) that do not.
    if (partitionPaths == null) {
      partitionPaths = new LinkedHashSet<>();
      absoluteDirs = new ArrayList<>();
    }
  }

  @Override
  public String newTaskTempFile(TaskAttemptContext ctx, Option<String> dir, FileNameSpec spec) {
    ensureTaskState();
    Path base = taskAttemptDir(ctx);
    if (dir.isDefined()) {
      partitionPaths.add(dir.get());
      base = new Path(base, dir.get());
    }
    return new Path(base, fileName(ctx, spec)).toString();
  }

  @Override
  @SuppressWarnings("deprecation")
  public String newTaskTempFile(TaskAttemptContext ctx, Option<String> dir, String ext) {
    return newTaskTempFile(ctx, dir, new FileNameSpec("", ext));
  }

  @Override
  public String newTaskTempFileAbsPath(TaskAttemptContext ctx, String absoluteDir,
      FileNameSpec spec) {
    ensureTaskState();
    Path target = new Path(absoluteDir);
    int index = absoluteDirs.indexOf(target);
    if (index < 0) {
      absoluteDirs.add(target);
      index = absoluteDirs.size() - 1;
    }
    Path staged = new Path(new Path(taskAttemptDir(ctx), ABSOLUTE_SUBDIR),
        Integer.toString(index));
    return new Path(staged, fileName(ctx, spec)).toString();
  }

  @Override
  @SuppressWarnings("deprecation")
  public String newTaskTempFileAbsPath(TaskAttemptContext ctx, String absoluteDir, String ext) {
    return newTaskTempFileAbsPath(ctx, absoluteDir, new FileNameSpec("", ext));
  }

  @Override
  public FileCommitProtocol.TaskCommitMessage commitTask(TaskAttemptContext ctx) {
    ensureTaskState();
    TaskAttemptID attempt = ctx.getTaskAttemptID();
    ManifestTaskCommitter committer = new ManifestTaskCommitter();
    // Asks Spark's OutputCommitCoordinator; a losing attempt gets CommitDeniedException (thrown
    // undeclared through Scala), which must propagate unchanged so the scheduler treats it as
    // "denied", not as a failure. IOExceptions of the manifest save propagate the same way.
    SparkHadoopMapRedUtil.commitTask(committer, ctx, attempt.getJobID().getId(),
        attempt.getTaskID().getId());
    TaskCommitInfo info = committer.result;
    if (info == null) {
      throw new IllegalStateException("task commit of " + attempt + " produced no manifest");
    }
    return new FileCommitProtocol.TaskCommitMessage(info);
  }

  @Override
  public void abortTask(TaskAttemptContext ctx) {
    Path dir = taskAttemptDir(ctx);
    Path tmpManifest = temporaryManifestPath(ctx);
    try {
      FileSystem fs = dir.getFileSystem(ctx.getConfiguration());
      fs.delete(dir, true);
      fs.delete(tmpManifest, false);
      if (!fs.exists(jobMarker())) {
        removeEmptyJobDirs(fs);
      }
    } catch (IOException e) {
      // Aborting must not mask the task's own failure; job cleanup deletes the whole job dir.
      LOG.warn("Manifest committer: could not delete aborted task attempt directory {}", dir, e);
    }
  }

  Path jobMarker() {
    return new Path(jobAttemptDir(), JOB_MARKER);
  }

  private void requireJob(FileSystem fs, TaskAttemptContext ctx, String action)
      throws IOException {
    if (!fs.exists(jobMarker())) {
      throw new IOException("task attempt " + ctx.getTaskAttemptID() + " cannot " + action
          + ": job " + jobId + " is not set up under " + jobAttemptDir()
          + " (committed, aborted, or never set up)");
    }
  }

  /**
   * The job is over, but this attempt may have recreated its directories after the job's
   * cleanup removed them (it was still running when the driver aborted the job). Only empty
   * directories go, deepest first: another late attempt's files stay for its own abort, and
   * {@code _temporary}, shared with other jobs, is left to job cleanup.
   */
  private void removeEmptyJobDirs(FileSystem fs) {
    Path attemptDir = jobAttemptDir();
    Path[] dirs = {new Path(attemptDir, TASKS_DIR), new Path(attemptDir, MANIFESTS_DIR),
        attemptDir, attemptDir.getParent()};
    for (Path d : dirs) {
      try {
        FileStatus[] children = fs.listStatus(d);
        if (children.length == 0) {
          fs.delete(d, false);  // non-recursive: fails rather than delete what just appeared
        }
      } catch (IOException e) {
        LOG.debug("Manifest committer: left {} of finished job {}", d, jobId, e);
      }
    }
  }

  /** The task commit proper, run by SparkHadoopMapRedUtil once the coordinator agrees. */
  private TaskCommitInfo commitAuthorized(TaskAttemptContext ctx) throws IOException {
    Configuration conf = ctx.getConfiguration();
    // A zombie attempt must not recreate a finished job's directory with a manifest.
    requireJob(jobAttemptDir().getFileSystem(conf), ctx, "commit");
    TaskManifestWriter writer = new TaskManifestWriter(conf);
    // Qualified paths, so the manifest's URIs carry a scheme as Hadoop's do.
    Path workDir = qualified(taskAttemptDir(ctx), conf);
    List<Path> absolute = new ArrayList<>();
    for (Path p : absoluteDirs) {
      absolute.add(qualified(p, conf));
    }
    long start = System.currentTimeMillis();
    TaskManifestWriter.Scan scan = writer.scan(workDir, qualified(destination(), conf),
        ABSOLUTE_SUBDIR, absolute);
    Map<String, String> extra = new LinkedHashMap<>();
    extra.put("committer", ManifestCommitProtocol.class.getName());
    extra.put("dynamicPartitionOverwrite", Boolean.toString(dynamicPartitionOverwrite));
    String taskId = ctx.getTaskAttemptID().getTaskID().toString();
    String attemptId = ctx.getTaskAttemptID().toString();
    writer.statistics().timed("task_stage_commit", System.currentTimeMillis() - start, false);
    byte[] bytes = writer.manifestBytes(jobId, JOB_ATTEMPT, taskId, attemptId, workDir, scan,
        extra);
    Path manifest = qualified(manifestPath(ctx), conf);
    writer.save(bytes, temporaryManifestPath(ctx), manifest);
    List<String> absoluteUris = new ArrayList<>();
    for (Path p : absolute) {
      absoluteUris.add(p.toUri().toString());
    }
    LOG.info("Manifest committer task {}: {} files, {} bytes, manifest {}", attemptId,
        scan.files.size(), scan.bytes, manifest);
    return new TaskCommitInfo(taskId, attemptId, manifest.toUri().toString(), scan.files.size(),
        scan.bytes, new ArrayList<>(partitionPaths), absoluteUris);
  }

  /**
   * The Hadoop {@code OutputCommitter} face SparkHadoopMapRedUtil needs to run the coordinator
   * handshake: commit means "write the manifest", abort means "delete the attempt directory".
   */
  private final class ManifestTaskCommitter extends OutputCommitter {
    private TaskCommitInfo result;

    @Override
    public void setupJob(JobContext jobContext) {}

    @Override
    public void setupTask(TaskAttemptContext taskContext) {}

    @Override
    public boolean needsTaskCommit(TaskAttemptContext taskContext) {
      // Always: even a task that wrote nothing must report, so job commit can check that the
      // manifest it is given belongs to the attempt Spark committed.
      return true;
    }

    @Override
    public void commitTask(TaskAttemptContext taskContext) throws IOException {
      result = commitAuthorized(taskContext);
    }

    @Override
    public void abortTask(TaskAttemptContext taskContext) {
      ManifestCommitProtocol.this.abortTask(taskContext);
    }
  }
}
