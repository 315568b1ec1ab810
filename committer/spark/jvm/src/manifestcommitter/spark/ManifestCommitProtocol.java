package manifestcommitter.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
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
import org.apache.spark.internal.io.FileCommitProtocol.TaskCommitMessage;
import org.apache.spark.internal.io.FileNameSpec;
import org.apache.spark.mapred.SparkHadoopMapRedUtil;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.Option;

/**
 * Spark commit protocol of the manifest committer (docs/spark.md): executors write each task
 * attempt under {@code <dest>/_temporary/manifest_<jobId>/00/tasks/<attempt>/} and save its
 * TaskManifest/1; the Python engine ({@link EngineClient}) sets up, commits and aborts the job.
 * A destination the engine cannot open goes to Spark's own protocol (the {@link
 * HadoopCommitProtocol} this extends), so a cluster-wide setting never breaks it.
 */
public class ManifestCommitProtocol extends HadoopCommitProtocol {
  private static final long serialVersionUID = 1L;
  private static final Logger LOG = LoggerFactory.getLogger(ManifestCommitProtocol.class);

  /** Spark never recovers a job attempt. */
  static final int JOB_ATTEMPT = 0;
  static final String TEMPORARY_DIR = "_temporary";
  static final String JOB_DIR_PREFIX = "manifest_";
  static final String TASKS_DIR = "tasks";
  static final String MANIFESTS_DIR = "manifests";
  static final String MANIFEST_SUFFIX = "-manifest.json";
  static final String TMP_SUFFIX = ".tmp";
  /** Created by job setup, deleted first by its cleanup: without it the job is over. */
  static final String JOB_MARKER = "_job.json";
  /** Files bound for custom partition locations (a partition directory's name has a '='). */
  static final String ABSOLUTE_SUBDIR = "_custom_locations";
  /** The session class: Spark 4's classic one, else Spark 3.5's. */
  private static final String[] SESSION_CLASSES = {
    "org.apache.spark.sql.classic.SparkSession", "org.apache.spark.sql.SparkSession"};
  /** The engine's schemes; kept equal to {@code committer.spark.engine.ENGINE_SCHEMES}. */
  static final List<String> ENGINE_SCHEMES = List.of("file", "abfs", "abfss", "wasb", "wasbs",
      "gs");

  private final String jobId;
  private final String path;
  private final boolean dynamicPartitionOverwrite;
  /** Whether the engine commits (else Spark's protocol): null until decided, on the driver. */
  private Boolean engineOpens;
  /** The task's custom locations, on the executor (each task deserializes its own copy). */
  private transient List<Path> absoluteDirs;

  public ManifestCommitProtocol(String jobId, String path, boolean dynamicPartitionOverwrite) {
    super(jobId, path, dynamicPartitionOverwrite);
    this.jobId = jobId;
    this.path = path;
    this.dynamicPartitionOverwrite = dynamicPartitionOverwrite;
  }

  public ManifestCommitProtocol(String jobId, String path) {
    this(jobId, path, false);
  }

  Path jobAttemptDir() {
    Path jobDir = new Path(new Path(new Path(path), TEMPORARY_DIR), JOB_DIR_PREFIX + jobId);
    return new Path(jobDir, String.format("%02d", JOB_ATTEMPT));
  }

  Path taskAttemptDir(TaskAttemptContext ctx) {
    return new Path(new Path(jobAttemptDir(), TASKS_DIR), ctx.getTaskAttemptID().toString());
  }

  /** The task's manifest, or ({@code temporary}) the attempt's before its rename. */
  Path manifestPath(TaskAttemptContext ctx, boolean temporary) {
    TaskAttemptID attempt = ctx.getTaskAttemptID();
    String name = temporary ? attempt + MANIFEST_SUFFIX + TMP_SUFFIX
        : attempt.getTaskID() + MANIFEST_SUFFIX;
    return new Path(new Path(jobAttemptDir(), MANIFESTS_DIR), name);
  }

  Path jobMarker() {
    return new Path(jobAttemptDir(), JOB_MARKER);
  }

  /** Spark's own naming: a retried task writes the same name into its own attempt directory. */
  String fileName(TaskAttemptContext ctx, FileNameSpec spec) {
    int split = ctx.getTaskAttemptID().getTaskID().getId();
    return String.format("%spart-%05d-%s%s", spec.prefix(), split, jobId, spec.suffix());
  }

  /** With scheme and authority: a schemeless URI would be ambiguous to the engine. */
  static Path qualified(Path path, Configuration conf) throws IOException {
    return path.getFileSystem(conf).makeQualified(path);
  }

  /** An I/O step whose failure becomes Spark's error. */
  interface IoStep<T> {
    T run() throws IOException;
  }

  /** {@code step}'s result; its failure as "manifest committer: {@code what}: <why>". */
  static <T> T unchecked(String what, IoStep<T> step) {
    try {
      return step.run();
    } catch (IOException e) {
      throw new UncheckedIOException("manifest committer: " + what + ": " + e.getMessage(), e);
    }
  }

  // ---------------------------------------------------------------- job (driver)

  /** Runs {@code operation}: the job's request plus {@code extra}. */
  private JsonNode callEngine(EngineClient engine, String operation, Configuration conf,
      Map<String, Object> extra) throws IOException {
    Map<String, Object> req = new LinkedHashMap<>();
    req.put("jobId", jobId);
    req.put("jobAttempt", JOB_ATTEMPT);
    // The qualified Hadoop URI string, which the engine decodes exactly once (HADOOP-17112).
    req.put("destinationUri", qualified(new Path(path), conf).toUri().toString());
    req.put("dynamicPartitionOverwrite", dynamicPartitionOverwrite);
    req.put("conf", engine.forwardedConf(conf));
    req.putAll(extra);
    return engine.call(operation, req);
  }

  /** Whether the engine opens the destination, else Spark's protocol takes it; decided once. */
  synchronized boolean engineCommits(Configuration conf) {
    if (engineOpens == null) {
      String destScheme = unchecked("no filesystem for " + path,
          () -> qualified(new Path(path), conf).toUri().getScheme());
      engineOpens = ENGINE_SCHEMES.contains(destScheme.toLowerCase(Locale.ROOT));
      if (!engineOpens) {
        scheme = destScheme;
        String factory = factory(conf);
        LOG.info("Manifest committer job {} at {}: the Python engine does not open {}://"
            + " destinations; committed by Spark's protocol with {}", jobId, path, scheme,
            factory != null ? factory : "its usual committer (FileOutputCommitter)");
      }
    }
    return engineOpens;
  }

  @Override
  public void setupJob(JobContext jobContext) {
    Configuration conf = jobContext.getConfiguration();
    if (!engineCommits(conf)) {
      super.setupJob(jobContext);
      return;
    }
    EngineClient engine = EngineClient.forJob(conf);
    LOG.info("Manifest committer job {} at {}: engine {}", jobId, path, engine.description());
    unchecked("setting up job " + jobId + " failed",
        () -> callEngine(engine, "setupJob", conf, Map.of()));
  }

  /**
   * Job commit on Spark 4 (Scala 2.13's immutable {@code Seq}). Neither overload says
   * {@code @Override}: each jar overrides the one its Spark calls.
   */
  public void commitJob(JobContext jobContext,
      scala.collection.immutable.Seq<TaskCommitMessage> messages) {
    Configuration conf = jobContext.getConfiguration();
    if (!engineCommits(conf)) {
      super.commitJob(jobContext, messages);
      return;
    }
    List<Map<String, Object>> committed = new ArrayList<>();
    Set<String> absoluteRoots = new LinkedHashSet<>();
    long files = 0;
    long bytes = 0;
    scala.collection.Iterator<TaskCommitMessage> it = messages.iterator();
    while (it.hasNext()) {
      TaskCommitInfo info = (TaskCommitInfo) it.next().obj();
      Map<String, Object> task = new LinkedHashMap<>();
      task.put("taskId", info.getTaskId());
      task.put("taskAttemptId", info.getTaskAttemptId());
      committed.add(task);
      absoluteRoots.addAll(info.getAbsoluteDirectories());
      files += info.getFileCount();
      bytes += info.getByteCount();
    }
    Map<String, Object> extra = new LinkedHashMap<>();
    extra.put("committedTasks", committed);
    extra.put("extraDestinationRoots", new ArrayList<>(absoluteRoots));
    EngineClient engine = EngineClient.forJob(conf);
    long start = System.nanoTime();
    // Spark calls abortJob next; the message is the engine's, so the user sees why.
    JsonNode result = unchecked("committing job " + jobId + " to " + path + " failed",
        () -> callEngine(engine, "commitJob", conf, extra));
    LOG.info("Manifest committer job {} committed {} tasks, {} files, {} bytes in {} ms via {}"
            + " ({})", jobId, committed.size(), files, bytes,
        (System.nanoTime() - start) / 1_000_000, engine.description(),
        result.path("summary").isMissingNode() ? "no summary" : "summary written");
  }

  /** Job commit on Spark 3.5 (Scala 2.12, where Spark's {@code Seq} is scala.collection's). */
  public void commitJob(JobContext jobContext,
      scala.collection.Seq<TaskCommitMessage> messages) {
    commitJob(jobContext, messages.toList());  // immutable, as Spark's protocol takes on both
  }

  /**
   * Static overwrite: a path on the destination's filesystem is moved into the job's directory
   * by the engine (restored if the job fails); one elsewhere is deleted, as by Spark's protocol.
   */
  @Override
  public boolean deleteWithJob(FileSystem fs, Path target, boolean recursive) {
    Configuration conf = driverConfiguration(fs);
    if (!engineCommits(conf)) {
      return super.deleteWithJob(fs, target, recursive);
    }
    return unchecked("job " + jobId + " could not replace " + target, () -> {
      Path qualifiedTarget = fs.makeQualified(target);
      URI dest = qualified(new Path(path), conf).toUri();
      URI uri = qualifiedTarget.toUri();
      if (dest.getScheme() == null || !dest.getScheme().equalsIgnoreCase(uri.getScheme())
          || !Objects.equals(dest.getAuthority(), uri.getAuthority())) {
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
          return fs.delete(target, false);  // fails: the filesystem says why
        }
      }
      EngineClient engine = EngineClient.forJob(conf);
      boolean moved = callEngine(engine, "deleteWithJob", conf, Map.of("path", uri.toString()))
          .path("moved").asBoolean(false);
      LOG.info("Manifest committer job {}: {} {} into the job directory (static overwrite)",
          jobId, moved ? "moved" : "nothing to move at", qualifiedTarget);
      return moved;
    });
  }

  /** The session's Hadoop configuration (runtime options included), else the filesystem's. */
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

  @Override
  public void abortJob(JobContext jobContext) {
    Configuration conf = jobContext.getConfiguration();
    if (!engineCommits(conf)) {
      super.abortJob(jobContext);
      return;
    }
    try {
      callEngine(EngineClient.forJob(conf), "abortJob", conf, Map.of());
    } catch (IOException | RuntimeException e) {
      // Never thrown: Spark calls this while handling the original failure, which must surface.
      LOG.error("Manifest committer: aborting job {} at {} failed; its directory {} may remain",
          jobId, path, jobAttemptDir().getParent(), e);
    }
  }

  // ---------------------------------------------------------------- task (executor)

  @Override
  public void setupTask(TaskAttemptContext ctx) {
    if (!engineCommits(ctx.getConfiguration())) {
      super.setupTask(ctx);
      return;
    }
    absoluteDirs = new ArrayList<>();
    Path dir = taskAttemptDir(ctx);
    unchecked("task attempt directory " + dir + " could not be created", () -> {
      FileSystem fs = dir.getFileSystem(ctx.getConfiguration());
      // A late task of an aborted job must not recreate its directory (mkdirs makes parents).
      requireJob(fs, ctx, "set up");
      if (!fs.mkdirs(dir)) {
        throw new IOException("mkdirs returned false for " + dir);
      }
      return null;
    });
  }

  @Override
  public String newTaskTempFile(TaskAttemptContext ctx, Option<String> dir, FileNameSpec spec) {
    if (!engineCommits(ctx.getConfiguration())) {
      return super.newTaskTempFile(ctx, dir, spec);
    }
    Path base = dir.isDefined() ? new Path(taskAttemptDir(ctx), dir.get()) : taskAttemptDir(ctx);
    return new Path(base, fileName(ctx, spec)).toString();
  }

  @Override
  public String newTaskTempFileAbsPath(TaskAttemptContext ctx, String absoluteDir,
      FileNameSpec spec) {
    if (!engineCommits(ctx.getConfiguration())) {
      return super.newTaskTempFileAbsPath(ctx, absoluteDir, spec);
    }
    if (absoluteDirs == null) {
      absoluteDirs = new ArrayList<>();  // a caller (a test, a tool) that skipped setupTask
    }
    Path target = new Path(absoluteDir);
    if (!absoluteDirs.contains(target)) {
      absoluteDirs.add(target);
    }
    Path staged = new Path(new Path(taskAttemptDir(ctx), ABSOLUTE_SUBDIR),
        Integer.toString(absoluteDirs.indexOf(target)));
    return new Path(staged, fileName(ctx, spec)).toString();
  }

  @Override
  public TaskCommitMessage commitTask(TaskAttemptContext ctx) {
    if (!engineCommits(ctx.getConfiguration())) {
      return super.commitTask(ctx);
    }
    TaskAttemptID attempt = ctx.getTaskAttemptID();
    ManifestTaskCommitter committer = new ManifestTaskCommitter();
    // Asks Spark's OutputCommitCoordinator. Its CommitDeniedException (undeclared, from Scala)
    // must propagate unchanged, so the scheduler sees "denied", not a failure.
    SparkHadoopMapRedUtil.commitTask(committer, ctx, attempt.getJobID().getId(),
        attempt.getTaskID().getId());
    if (committer.result == null) {
      throw new IllegalStateException("task commit of " + attempt + " produced no manifest");
    }
    return new TaskCommitMessage(committer.result);
  }

  @Override
  public void abortTask(TaskAttemptContext ctx) {
    if (!engineCommits(ctx.getConfiguration())) {
      super.abortTask(ctx);
      return;
    }
    Path dir = taskAttemptDir(ctx);
    try {
      FileSystem fs = dir.getFileSystem(ctx.getConfiguration());
      fs.delete(dir, true);
      fs.delete(manifestPath(ctx, true), false);
      if (!fs.exists(jobMarker())) {
        // The job is over, yet this late attempt may have recreated its directories: the empty
        // ones go, deepest first (_temporary is shared with other jobs). Non-recursive deletes
        // fail rather than remove what another late attempt just wrote.
        Path attemptDir = jobAttemptDir();
        for (Path d : new Path[] {new Path(attemptDir, TASKS_DIR),
            new Path(attemptDir, MANIFESTS_DIR), attemptDir, attemptDir.getParent()}) {
          try {
            if (fs.listStatus(d).length == 0) {
              fs.delete(d, false);
            }
          } catch (IOException e) {
            LOG.debug("Manifest committer: left {} of finished job {}", d, jobId, e);
          }
        }
      }
    } catch (IOException e) {
      // Must not mask the task's own failure; job cleanup deletes the whole job directory.
      LOG.warn("Manifest committer: could not delete aborted task attempt directory {}", dir, e);
    }
  }

  private void requireJob(FileSystem fs, TaskAttemptContext ctx, String action)
      throws IOException {
    if (!fs.exists(jobMarker())) {
      throw new IOException("task attempt " + ctx.getTaskAttemptID() + " cannot " + action
          + ": job " + jobId + " is not set up under " + jobAttemptDir()
          + " (committed, aborted, or never set up)");
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
    List<String> absoluteUris = new ArrayList<>();
    for (Path p : absoluteDirs != null ? absoluteDirs : List.<Path>of()) {
      Path dir = qualified(p, conf);
      absolute.add(dir);
      absoluteUris.add(dir.toUri().toString());
    }
    long start = System.currentTimeMillis();
    writer.scan(workDir, qualified(new Path(path), conf), absolute);
    Map<String, String> extra = new LinkedHashMap<>();
    extra.put("committer", ManifestCommitProtocol.class.getName());
    extra.put("dynamicPartitionOverwrite", Boolean.toString(dynamicPartitionOverwrite));
    String taskId = ctx.getTaskAttemptID().getTaskID().toString();
    String attemptId = ctx.getTaskAttemptID().toString();
    writer.stats.timed("task_stage_commit", System.currentTimeMillis() - start, false);
    byte[] bytes = writer.manifestBytes(jobId, JOB_ATTEMPT, taskId, attemptId, workDir, extra);
    Path manifest = qualified(manifestPath(ctx, false), conf);
    writer.save(bytes, manifestPath(ctx, true), manifest);
    LOG.info("Manifest committer task {}: {} files, {} bytes, manifest {}", attemptId,
        writer.files.size(), writer.bytes, manifest);
    return new TaskCommitInfo(taskId, attemptId, manifest.toUri().toString(),
        writer.files.size(), writer.bytes, absoluteUris);
  }

  /** The OutputCommitter of the coordinator handshake: its commit writes the manifest. */
  private final class ManifestTaskCommitter extends OutputCommitter {
    private TaskCommitInfo result;

    @Override
    public void setupJob(JobContext jobContext) {}

    @Override
    public void setupTask(TaskAttemptContext taskContext) {}

    @Override
    public boolean needsTaskCommit(TaskAttemptContext taskContext) {
      return true;  // even with no file: job commit checks every committed attempt's manifest
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
