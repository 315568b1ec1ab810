package manifestcommitter.spark;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletionService;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorCompletionService;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFileSystem;
import org.apache.hadoop.fs.EtagSource;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Task commit on the executor: scans a task attempt directory into a Hadoop TaskManifest/1
 * and saves it, the same manifest the Python task side writes ({@code committer/task/}).
 */
final class TaskManifestWriter {
  static final String MANIFEST_TYPE =
      "org.apache.hadoop.mapreduce.lib.output.committer.manifest.files.TaskManifest/1";
  static final String SAVE_ATTEMPTS_KEY = "mapreduce.manifest.committer.manifest.save.attempts";
  static final int SAVE_ATTEMPTS_DEFAULT = 5;
  /** Hadoop's key (and default) for a committer stage's store operations in flight. */
  static final String IO_THREADS_KEY = "mapreduce.manifest.committer.io.threads";
  static final int IO_THREADS_DEFAULT = 32;
  /** Hadoop's DirEntry status (EntryStatus ordinal) "unknown": job commit probes itself. */
  static final int STATUS_UNKNOWN = 0;
  /** Hadoop's path capability: a rename keeps the file's etag ({@code CommonPathCapabilities}). */
  static final String ETAGS_PRESERVED_IN_RENAME = "fs.capability.etags.preserved.in.rename";

  private static final Logger LOG = LoggerFactory.getLogger(TaskManifestWriter.class);
  private static final ObjectMapper JSON = new ObjectMapper();

  private final Configuration conf;
  final Stats stats = new Stats();
  final List<Map<String, Object>> files = new ArrayList<>();
  final List<Map<String, Object>> directories = new ArrayList<>();
  long bytes;
  /** The filesystem's renames keep etags: a status's etag identifies the file. */
  private boolean etagsIdentify;
  /** The walk's directories below the destination; the first {@code recorded} have entries. */
  private final List<Path> walk = new ArrayList<>();
  private int recorded;
  /** Directories' listings fetched ahead, side by side ({@link #listTree}); else listed here. */
  private Map<Path, FileStatus[]> listed = Map.of();

  TaskManifestWriter(Configuration conf) {
    this.conf = conf;
  }

  /**
   * Lists {@code workDir} into entries, files under {@code _custom_locations/<i>/} bound for
   * {@code absoluteDirs.get(i)}, as {@code committer/task/scan.py} does (the contract is in
   * docs/protocol.md). listStatus, not listFiles(dir, true): without Hadoop's native library
   * that forks a process per local entry.
   */
  void scan(Path workDir, Path dest, List<Path> absoluteDirs) throws IOException {
    long start = System.currentTimeMillis();
    boolean failed = true;
    try {
      FileSystem fs = workDir.getFileSystem(conf);
      try {
        etagsIdentify = fs.hasPathCapability(workDir, ETAGS_PRESERVED_IN_RENAME);
      } catch (IOException | RuntimeException e) {
        etagsIdentify = false;
      }
      FileStatus[] top;
      try {
        top = list(fs, workDir);
      } catch (FileNotFoundException e) {
        // A task that wrote nothing may never have had its directory created by the store.
        top = new FileStatus[0];
      }
      listed = listTree(fs, workDir, top);
      for (FileStatus st : top) {
        if (st.isDirectory() && st.getPath().getName().equals(
            ManifestCommitProtocol.ABSOLUTE_SUBDIR)) {
          scanAbsolute(fs, st.getPath(), absoluteDirs);
        } else {
          visit(fs, st, dest);
        }
      }
      stats.increment("committer_task_file_count", files.size());
      stats.increment("committer_task_file_size", bytes);
      stats.increment("committer_task_directory_count", directories.size());
      failed = false;
    } finally {
      stats.timed("task_stage_scan_directory", System.currentTimeMillis() - start, failed);
    }
  }

  private FileStatus[] list(FileSystem fs, Path dir) throws IOException {
    FileStatus[] fetched = listed.get(dir);
    if (fetched != null) {
      return fetched;
    }
    stats.increment("op_list_status", 1);
    return fs.listStatus(dir);
  }

  /**
   * Every directory's listing below {@code top}, fetched {@code io.threads} at a time, level by
   * level as each listing names the next: on a cloud store each listing waits a round trip, and
   * one after another they were most of a task's commit (a task writing into 100 partitions
   * lists 101 directories: 3.9 s at 20 ms a request, sequentially). The walk then reads them
   * here, in the same order as before, so the manifest is the same. Local disk too: a network
   * mount's listing waits as well, and a local one's pool costs a few threads' start. One
   * directory at the top is enough: {@code year=2024/month=1..12} lists its months together.
   */
  private Map<Path, FileStatus[]> listTree(FileSystem fs, Path workDir, FileStatus[] top)
      throws IOException {
    int threads = conf.getInt(IO_THREADS_KEY, IO_THREADS_DEFAULT);
    if (threads < 2 || Arrays.stream(top).noneMatch(FileStatus::isDirectory)) {
      return Map.of();
    }
    Map<Path, FileStatus[]> out = new HashMap<>();
    AtomicInteger named = new AtomicInteger();
    ExecutorService pool = Executors.newFixedThreadPool(threads, r -> {
      Thread t = new Thread(r, "manifest-task-scan-" + named.incrementAndGet());
      t.setDaemon(true);
      return t;
    });
    try {
      CompletionService<Map.Entry<Path, FileStatus[]>> done =
          new ExecutorCompletionService<>(pool);
      int pending = 0;
      for (FileStatus st : top) {
        if (st.isDirectory()) {
          Path dir = st.getPath();
          done.submit(() -> Map.entry(dir, fs.listStatus(dir)));
          pending++;
        }
      }
      while (pending > 0) {
        Map.Entry<Path, FileStatus[]> one = done.take().get();
        pending--;
        stats.increment("op_list_status", 1);
        out.put(one.getKey(), one.getValue());
        for (FileStatus child : one.getValue()) {
          if (child.isDirectory()) {
            Path dir = child.getPath();
            done.submit(() -> Map.entry(dir, fs.listStatus(dir)));
            pending++;
          }
        }
      }
      return out;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new InterruptedIOException("interrupted listing " + workDir);
    } catch (ExecutionException e) {
      Throwable cause = e.getCause();
      if (cause instanceof IOException) {
        throw (IOException) cause;
      }
      if (cause instanceof RuntimeException) {
        throw (RuntimeException) cause;
      }
      throw new IOException("listing " + workDir + " failed", cause);
    } finally {
      pool.shutdownNow();  // after a failure: the other listings are not waited for
    }
  }

  private void visit(FileSystem fs, FileStatus st, Path parent) throws IOException {
    Path target = new Path(parent, st.getPath().getName());
    if (st.isDirectory()) {
      walk.add(target);
      for (FileStatus child : list(fs, st.getPath())) {
        visit(fs, child, target);
      }
      walk.remove(walk.size() - 1);
      recorded = Math.min(recorded, walk.size());
    } else if (addFile(st, target)) {
      // The directories holding it that have no entry yet, outermost first.
      for (; recorded < walk.size(); recorded++) {
        Map<String, Object> entry = new LinkedHashMap<>();
        entry.put("d", uriString(walk.get(recorded)));
        entry.put("t", STATUS_UNKNOWN);
        entry.put("l", recorded + 1);
        directories.add(entry);
      }
    }
  }

  /** Custom locations' files; no DirEntry: Hadoop's levels are relative to the destination. */
  private void scanAbsolute(FileSystem fs, Path absRoot, List<Path> absoluteDirs)
      throws IOException {
    for (FileStatus indexDir : list(fs, absRoot)) {
      int index;
      try {
        index = Integer.parseInt(indexDir.getPath().getName());
      } catch (NumberFormatException e) {
        throw new IOException("unexpected entry in the custom-location area: "
            + indexDir.getPath());
      }
      if (!indexDir.isDirectory() || index < 0 || index >= absoluteDirs.size()) {
        throw new IOException("no custom location recorded for " + indexDir.getPath());
      }
      for (FileStatus f : list(fs, indexDir.getPath())) {
        if (f.isDirectory()) {
          throw new IOException("a custom-location file must not be a directory: " + f.getPath());
        }
        addFile(f, new Path(absoluteDirs.get(index), f.getPath().getName()));
      }
    }
  }

  /** Adds the file entry of {@code st} unless it is a checksum side file; whether it did. */
  private boolean addFile(FileStatus st, Path target) {
    String name = st.getPath().getName();
    if (name.startsWith(".") && name.endsWith(".crc")) {
      return false;
    }
    Map<String, Object> entry = new LinkedHashMap<>();
    entry.put("s", uriString(st.getPath()));
    entry.put("d", uriString(target));
    entry.put("z", st.getLen());
    String identity = identity(st);
    if (identity != null) {
      entry.put("e", identity);
    }
    files.add(entry);
    bytes += st.getLen();
    return true;
  }

  /**
   * The file's identity ("e"): the status's etag where renames keep it, as Hadoop records it;
   * else a local file's inode, mtime (ns) and size ({@code committer.store.local.file_etag}).
   */
  private String identity(FileStatus st) {
    if (etagsIdentify && st instanceof EtagSource) {
      String etag = ((EtagSource) st).getEtag();
      if (etag != null && !etag.isEmpty()) {
        return etag;
      }
    }
    URI uri = st.getPath().toUri();
    if (!"file".equalsIgnoreCase(uri.getScheme())) {
      return null;
    }
    try {
      java.nio.file.Path p = Paths.get(uri.getPath());
      Object ino = Files.getAttribute(p, "unix:ino", LinkOption.NOFOLLOW_LINKS);
      long mtimeNs = Files.getLastModifiedTime(p, LinkOption.NOFOLLOW_LINKS)
          .to(TimeUnit.NANOSECONDS);
      return Long.toHexString(((Number) ino).longValue()) + "-" + Long.toHexString(mtimeNs)
          + "-" + Long.toHexString(Files.size(p));
    } catch (IOException | UnsupportedOperationException | IllegalArgumentException
        | ClassCastException e) {
      return null;
    }
  }

  /** A URI string with one spelling per location, as Python writes it: file:/x, not file:///x. */
  static String uriString(Path path) {
    URI uri = path.toUri();
    String authority = uri.getRawAuthority();
    if ("file".equalsIgnoreCase(uri.getScheme()) && (authority == null || authority.isEmpty())
        && uri.getRawPath() != null && uri.getRawPath().startsWith("/")) {
      return "file:" + uri.getRawPath();
    }
    return uri.toString();
  }

  /** The TaskManifest/1 document of the scan. */
  byte[] manifestBytes(String jobId, int jobAttempt, String taskId, String taskAttemptId,
      Path workDir, Map<String, String> extraData) throws IOException {
    Map<String, Object> doc = new LinkedHashMap<>();
    doc.put("type", MANIFEST_TYPE);
    doc.put("version", 1);
    doc.put("jobId", jobId);
    doc.put("jobAttemptNumber", jobAttempt);
    doc.put("taskID", taskId);
    doc.put("taskAttemptID", taskAttemptId);
    doc.put("taskAttemptDir", uriString(workDir));
    doc.put("files", files);
    doc.put("directories", directories);
    doc.put("iostatistics", stats.snapshot());
    doc.put("extraData", extraData);
    return JSON.writeValueAsBytes(doc);
  }

  /**
   * Saves {@code bytes} as {@code tmp}, renamed over {@code dest} (HADOOP-17258): in one step on
   * local disk, else deleting the old one first (Hadoop's rename never replaces). The whole
   * sequence is retried (MAPREDUCE-7474).
   */
  void save(byte[] bytes, Path tmp, Path dest) throws IOException {
    int attempts = Math.max(1, conf.getInt(SAVE_ATTEMPTS_KEY, SAVE_ATTEMPTS_DEFAULT));
    FileSystem fs = dest.getFileSystem(conf);
    IOException last = null;
    for (int attempt = 1; attempt <= attempts; attempt++) {
      long start = System.currentTimeMillis();
      try {
        replace(fs, bytes, tmp, dest);
        stats.timed("task_stage_save_manifest", System.currentTimeMillis() - start, false);
        return;
      } catch (IOException e) {
        stats.timed("task_stage_save_manifest", System.currentTimeMillis() - start, true);
        last = e;
        LOG.warn("Saving task manifest {} failed (attempt {} of {})", dest, attempt, attempts, e);
      }
      if (attempt < attempts) {
        try {
          Thread.sleep(Math.min(2000L, 100L << Math.min(attempt - 1, 5)));
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          throw new InterruptedIOException("interrupted while retrying a task manifest save");
        }
      }
    }
    throw new IOException(
        "could not save task manifest " + dest + " after " + attempts + " attempts", last);
  }

  private void replace(FileSystem fs, byte[] bytes, Path tmp, Path dest) throws IOException {
    FileSystem raw = fs instanceof ChecksumFileSystem
        ? ((ChecksumFileSystem) fs).getRawFileSystem() : fs;
    // Locally through the raw filesystem: no checksum side file (the JSON is checked whole),
    // and its rename is rename(2), which replaces the target in one step.
    boolean local = raw instanceof RawLocalFileSystem;
    FileSystem target = local ? raw : fs;
    try (FSDataOutputStream out = target.create(tmp, true)) {
      out.write(bytes);
    }
    if (!local) {  // Hadoop's rename never replaces
      stats.increment("op_delete", 1);
      fs.delete(dest, false);
    }
    stats.increment("op_rename", 1);
    if (!target.rename(tmp, dest)) {
      throw new IOException("rename of " + tmp + " to " + dest + " returned false");
    }
  }

  /**
   * IOStatistics in Hadoop's shape: timed X has counters X and X.failures (both, as Hadoop's
   * are), and X[.failures].min/.max/.mean (samples, sum) in ms. One thread's.
   */
  static final class Stats {
    private final Map<String, Long> counters = new TreeMap<>();
    private final Map<String, Long> minimums = new TreeMap<>();
    private final Map<String, Long> maximums = new TreeMap<>();
    private final Map<String, Map<String, Long>> means = new TreeMap<>();

    void increment(String name, long by) {
      counters.merge(name, by, Long::sum);
    }

    void timed(String name, long millis, boolean failed) {
      String key = failed ? name + ".failures" : name;
      counters.putIfAbsent(name, 0L);
      counters.putIfAbsent(name + ".failures", 0L);
      increment(key, 1);
      minimums.merge(key + ".min", millis, Math::min);
      maximums.merge(key + ".max", millis, Math::max);
      Map<String, Long> mean = means.computeIfAbsent(key + ".mean", k -> new LinkedHashMap<>());
      mean.merge("samples", 1L, Long::sum);
      mean.merge("sum", millis, Long::sum);
    }

    Map<String, Object> snapshot() {
      Map<String, Object> out = new LinkedHashMap<>();
      out.put("counters", counters);
      out.put("gauges", Map.of());
      out.put("minimums", minimums);
      out.put("maximums", maximums);
      out.put("meanstatistics", means);
      return out;
    }
  }
}
