package manifestcommitter.spark;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFileSystem;
import org.apache.hadoop.fs.EtagSource;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileContext;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Options;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Task commit work on the executor: scan a task attempt directory, build the Hadoop
 * TaskManifest/1 document and save it under the temporary name, then rename it into place.
 */
final class TaskManifestWriter {
  static final String MANIFEST_TYPE =
      "org.apache.hadoop.mapreduce.lib.output.committer.manifest.files.TaskManifest/1";
  static final String SAVE_ATTEMPTS_KEY = "mapreduce.manifest.committer.manifest.save.attempts";
  static final int SAVE_ATTEMPTS_DEFAULT = 5;

  // Hadoop's DirEntry status code (EntryStatus ordinal) "unknown": job commit probes itself.
  static final int STATUS_UNKNOWN = 0;

  private static final Logger LOG = LoggerFactory.getLogger(TaskManifestWriter.class);
  private static final ObjectMapper JSON = new ObjectMapper();

  /** The outcome of a scan: the manifest document plus the totals reported to the driver. */
  static final class Scan {
    final List<Map<String, Object>> files = new ArrayList<>();
    final List<Map<String, Object>> directories = new ArrayList<>();
    long bytes;
    /** The filesystem's etags survive its renames: a status's etag identifies the file. */
    boolean etagsIdentify;
  }

  /** Hadoop's path capability: a rename keeps the file's etag ({@code CommonPathCapabilities}). */
  static final String ETAGS_PRESERVED_IN_RENAME = "fs.capability.etags.preserved.in.rename";

  private final Configuration conf;
  private final IoStatistics stats = new IoStatistics();

  TaskManifestWriter(Configuration conf) {
    this.conf = conf;
  }

  IoStatistics statistics() {
    return stats;
  }

  /**
   * Lists {@code workDir} recursively. Files under it map to the same relative path under
   * {@code dest}; files under {@code workDir/<absoluteSubdir>/<i>/} map to
   * {@code absoluteDirs.get(i)}. Local checksum side files ({@code .name.crc}) are not output.
   *
   * <p>The task-commit contract shared with the Python task side ({@code committer/task/scan.py}):
   * a directory entry for every directory under the destination that holds output (a file, at
   * any depth), with status UNKNOWN and its depth; empty directories are not output. Job commit
   * probes and creates directories itself, when it runs: a state seen at task commit would be
   * stale by then, so none is probed here.
   *
   * <p>A recursive {@code listStatus} is used rather than {@code listFiles(dir, true)}: on the
   * local filesystem without Hadoop's native library the latter forks a process per entry.
   */
  Scan scan(Path workDir, Path dest, String absoluteSubdir, List<Path> absoluteDirs)
      throws IOException {
    long start = System.currentTimeMillis();
    boolean failed = true;
    try {
      FileSystem fs = workDir.getFileSystem(conf);
      Scan scan = new Scan();
      scan.etagsIdentify = etagsIdentify(fs, workDir);
      FileStatus[] top;
      try {
        stats.increment("op_list_status", 1);
        top = fs.listStatus(workDir);
      } catch (FileNotFoundException e) {
        // A task that wrote nothing may never have had its directory created by the store.
        top = new FileStatus[0];
      }
      DirFrame root = new DirFrame(dest, 0, null);
      for (FileStatus st : top) {
        String name = st.getPath().getName();
        if (st.isDirectory() && name.equals(absoluteSubdir)) {
          scanAbsolute(fs, st.getPath(), absoluteDirs, scan);
        } else {
          visit(fs, st, root, scan);
        }
      }
      stats.increment("committer_task_file_count", scan.files.size());
      stats.increment("committer_task_file_size", scan.bytes);
      stats.increment("committer_task_directory_count", scan.directories.size());
      failed = false;
      return scan;
    } finally {
      stats.timed("task_stage_scan_directory", System.currentTimeMillis() - start, failed);
    }
  }

  /** A destination directory on the current walk; recorded once, when a file is found in it. */
  private static final class DirFrame {
    final Path target;
    final int depth;
    final DirFrame parent;
    boolean recorded;

    DirFrame(Path target, int depth, DirFrame parent) {
      this.target = target;
      this.depth = depth;
      this.parent = parent;
    }
  }

  private void visit(FileSystem fs, FileStatus st, DirFrame parent, Scan scan)
      throws IOException {
    String name = st.getPath().getName();
    Path target = new Path(parent.target, name);
    if (st.isDirectory()) {
      DirFrame frame = new DirFrame(target, parent.depth + 1, parent);
      stats.increment("op_list_status", 1);
      for (FileStatus child : fs.listStatus(st.getPath())) {
        visit(fs, child, frame, scan);
      }
    } else if (!isChecksumFile(name)) {
      scan.files.add(fileEntry(st, target, scan.etagsIdentify));
      scan.bytes += st.getLen();
      record(parent, scan);
    }
  }

  /** Records {@code dir} and its unrecorded ancestors below the destination, outermost first. */
  private static void record(DirFrame dir, Scan scan) {
    List<DirFrame> pending = new ArrayList<>();
    for (DirFrame d = dir; d != null && d.depth > 0 && !d.recorded; d = d.parent) {
      pending.add(d);
    }
    for (int i = pending.size() - 1; i >= 0; i--) {
      DirFrame d = pending.get(i);
      d.recorded = true;
      scan.directories.add(dirEntry(d.target, STATUS_UNKNOWN, d.depth));
    }
  }

  private void scanAbsolute(FileSystem fs, Path absRoot, List<Path> absoluteDirs, Scan scan)
      throws IOException {
    stats.increment("op_list_status", 1);
    for (FileStatus indexDir : fs.listStatus(absRoot)) {
      int index;
      try {
        index = Integer.parseInt(indexDir.getPath().getName());
      } catch (NumberFormatException e) {
        throw new IOException("unexpected entry in the custom-location area: " + indexDir.getPath());
      }
      if (!indexDir.isDirectory() || index < 0 || index >= absoluteDirs.size()) {
        throw new IOException("no custom location recorded for " + indexDir.getPath());
      }
      Path absDir = absoluteDirs.get(index);
      // No DirEntry for a custom location: Hadoop's DirEntry levels are relative to the
      // destination, and job commit creates every file's parent directory anyway.
      stats.increment("op_list_status", 1);
      for (FileStatus f : fs.listStatus(indexDir.getPath())) {
        if (f.isDirectory()) {
          throw new IOException("a custom-location file must not be a directory: " + f.getPath());
        }
        if (!isChecksumFile(f.getPath().getName())) {
          scan.files.add(fileEntry(f, new Path(absDir, f.getPath().getName()),
              scan.etagsIdentify));
          scan.bytes += f.getLen();
        }
      }
    }
  }

  static boolean isChecksumFile(String name) {
    return name.startsWith(".") && name.endsWith(".crc");
  }

  private static Map<String, Object> fileEntry(FileStatus st, Path target,
      boolean etagsIdentify) {
    Map<String, Object> entry = new LinkedHashMap<>();
    entry.put("s", uriString(st.getPath()));
    entry.put("d", uriString(target));
    entry.put("z", st.getLen());
    String identity = identity(st, etagsIdentify);
    if (identity != null) {
      entry.put("e", identity);
    }
    return entry;
  }

  /**
   * Whether {@code fs} says its renames keep a file's etag ({@link #ETAGS_PRESERVED_IN_RENAME}:
   * ABFS with a hierarchical namespace does): only then does an etag prove that a renamed
   * destination is the file, which is what job commit uses "e" for. A store whose rename is a
   * copy (S3A, flat Blob storage) gives the destination a new etag; there job commit records
   * what does prove it (a content checksum) itself.
   */
  static boolean etagsIdentify(FileSystem fs, Path dir) {
    try {
      return fs.hasPathCapability(dir, ETAGS_PRESERVED_IN_RENAME);
    } catch (IOException | RuntimeException e) {
      return false;
    }
  }

  /**
   * What the manifest records as the file's identity ("e"), so that job commit can later prove
   * a renamed destination is this file without listing the task's directory first: the etag
   * the filesystem's status offers ({@link EtagSource}: ABFS and other connectors), as
   * Hadoop's own task scan records it, where the filesystem's renames keep it
   * ({@code etagsIdentify}); else, for a local file, {@link #localIdentity}; else none (Hadoop
   * omits the key), and job commit identifies the file itself.
   */
  static String identity(FileStatus st, boolean etagsIdentify) {
    if (etagsIdentify && st instanceof EtagSource) {
      String etag = ((EtagSource) st).getEtag();
      if (etag != null && !etag.isEmpty()) {
        return etag;
      }
    }
    return localIdentity(st);
  }

  /**
   * The identity of a local file that a rename keeps: inode, modification time (ns) and size,
   * in the engine's format ({@code committer.store.local.file_etag}). With it, a job commit
   * resumed after a crash can prove that a renamed destination is this file. Null for other
   * stores and for a local file whose attributes cannot be read.
   */
  static String localIdentity(FileStatus st) {
    URI uri = st.getPath().toUri();
    if (!"file".equalsIgnoreCase(uri.getScheme())) {
      return null;
    }
    try {
      // java.nio's Path, not Hadoop's (imported by name in this file).
      java.nio.file.Path p = Paths.get(uri.getPath());
      Object ino = Files.getAttribute(p, "unix:ino", LinkOption.NOFOLLOW_LINKS);
      long mtimeNs = Files.getLastModifiedTime(p, LinkOption.NOFOLLOW_LINKS)
          .to(TimeUnit.NANOSECONDS);
      long size = Files.size(p);
      return Long.toHexString(((Number) ino).longValue()) + "-" + Long.toHexString(mtimeNs)
          + "-" + Long.toHexString(size);
    } catch (IOException | UnsupportedOperationException | IllegalArgumentException
        | ClassCastException e) {
      return null;
    }
  }

  /**
   * A path's URI string with one spelling per location, as the Python task side writes it: a
   * local path is {@code file:/x}, never {@code file:///x} (a qualified local path's empty
   * authority, which listings carry and child paths drop).
   */
  static String uriString(Path path) {
    URI uri = path.toUri();
    String authority = uri.getRawAuthority();
    if ("file".equalsIgnoreCase(uri.getScheme()) && (authority == null || authority.isEmpty())
        && uri.getRawPath() != null && uri.getRawPath().startsWith("/")) {
      return "file:" + uri.getRawPath();
    }
    return uri.toString();
  }

  private static Map<String, Object> dirEntry(Path dir, int status, int depth) {
    Map<String, Object> entry = new LinkedHashMap<>();
    entry.put("d", uriString(dir));
    entry.put("t", status);
    entry.put("l", depth);
    return entry;
  }

  /** Builds the TaskManifest/1 document. */
  byte[] manifestBytes(
      String jobId, int jobAttempt, String taskId, String taskAttemptId, Path workDir,
      Scan scan, Map<String, String> extraData) throws IOException {
    Map<String, Object> doc = new LinkedHashMap<>();
    doc.put("type", MANIFEST_TYPE);
    doc.put("version", 1);
    doc.put("jobId", jobId);
    doc.put("jobAttemptNumber", jobAttempt);
    doc.put("taskID", taskId);
    doc.put("taskAttemptID", taskAttemptId);
    doc.put("taskAttemptDir", uriString(workDir));
    doc.put("files", scan.files);
    doc.put("directories", scan.directories);
    doc.put("iostatistics", stats.snapshot());
    doc.put("extraData", extraData);
    return JSON.writeValueAsBytes(doc);
  }

  /** How a save put the manifest in place. */
  enum Replacement {
    /** Local disk: rename(2) replaces the old manifest in one step. */
    RENAME_OVER_LOCAL,
    /** HDFS: rename with {@code Options.Rename.OVERWRITE}, one step in the NameNode. */
    RENAME_OVER_HDFS,
    /**
     * Any other filesystem: Hadoop's {@code FileSystem.rename} never replaces, so an existing
     * manifest is deleted first and, until the rename, there is none.
     */
    DELETE_THEN_RENAME
  }

  /** The replacement {@link #save} uses on {@code fs}. */
  static Replacement replacementFor(FileSystem fs) {
    if (rawLocal(fs) != null) {
      return Replacement.RENAME_OVER_LOCAL;
    }
    if ("hdfs".equalsIgnoreCase(fs.getUri().getScheme())) {
      return Replacement.RENAME_OVER_HDFS;
    }
    return Replacement.DELETE_THEN_RENAME;
  }

  private static RawLocalFileSystem rawLocal(FileSystem fs) {
    FileSystem raw = fs instanceof ChecksumFileSystem ? ((ChecksumFileSystem) fs).getRawFileSystem()
        : fs;
    return raw instanceof RawLocalFileSystem ? (RawLocalFileSystem) raw : null;
  }

  /**
   * Saves {@code bytes} to {@code tmp} and moves it over {@code dest}, retrying the whole
   * sequence (MAPREDUCE-7474: a store under load may fail the rename once). A later attempt of
   * the same task replaces an existing manifest (HADOOP-17258); where the filesystem can rename
   * over a file (local disk, HDFS) readers see the old manifest or the new one, never none (see
   * {@link Replacement}).
   *
   * @return how the manifest was put in place
   */
  Replacement save(byte[] bytes, Path tmp, Path dest) throws IOException {
    int attempts = Math.max(1, conf.getInt(SAVE_ATTEMPTS_KEY, SAVE_ATTEMPTS_DEFAULT));
    FileSystem fs = dest.getFileSystem(conf);
    Replacement how = replacementFor(fs);
    IOException last = null;
    for (int attempt = 1; attempt <= attempts; attempt++) {
      long start = System.currentTimeMillis();
      try {
        replace(fs, how, bytes, tmp, dest);
        stats.timed("task_stage_save_manifest", System.currentTimeMillis() - start, false);
        return how;
      } catch (IOException e) {
        stats.timed("task_stage_save_manifest", System.currentTimeMillis() - start, true);
        last = e;
        LOG.warn("Saving task manifest {} failed (attempt {} of {})", dest, attempt, attempts, e);
        if (attempt < attempts) {
          sleepBeforeRetry(attempt);
        }
      }
    }
    throw new IOException(
        "could not save task manifest " + dest + " after " + attempts + " attempts", last);
  }

  private void replace(FileSystem fs, Replacement how, byte[] bytes, Path tmp, Path dest)
      throws IOException {
    switch (how) {
      case RENAME_OVER_LOCAL: {
        // Written through the raw filesystem: no checksum side file to carry along, and the
        // manifest is JSON the reader checks whole.
        RawLocalFileSystem raw = rawLocal(fs);
        write(raw, tmp, bytes);
        stats.increment("op_rename", 1);
        java.nio.file.Path from = raw.pathToFile(raw.makeQualified(tmp)).toPath();
        java.nio.file.Path to = raw.pathToFile(raw.makeQualified(dest)).toPath();
        try {
          // ATOMIC_MOVE is rename(2), which replaces an existing target in one step.
          Files.move(from, to, StandardCopyOption.ATOMIC_MOVE);
        } catch (NoSuchFileException e) {
          throw new FileNotFoundException("rename of " + tmp + " to " + dest + ": " + e);
        }
        return;
      }
      case RENAME_OVER_HDFS:
        write(fs, tmp, bytes);
        stats.increment("op_rename", 1);
        FileContext.getFileContext(fs.getUri(), conf).rename(
            fs.makeQualified(tmp), fs.makeQualified(dest), Options.Rename.OVERWRITE);
        return;
      default:
        write(fs, tmp, bytes);
        stats.increment("op_delete", 1);
        fs.delete(dest, false);
        stats.increment("op_rename", 1);
        if (!fs.rename(tmp, dest)) {
          throw new IOException("rename of " + tmp + " to " + dest + " returned false");
        }
    }
  }

  private static void write(FileSystem fs, Path path, byte[] bytes) throws IOException {
    try (FSDataOutputStream out = fs.create(path, true)) {
      out.write(bytes);
    }
  }

  private static void sleepBeforeRetry(int attempt) throws InterruptedIOException {
    try {
      Thread.sleep(Math.min(2000L, 100L << Math.min(attempt - 1, 5)));
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new InterruptedIOException("interrupted while retrying a task manifest save");
    }
  }
}
