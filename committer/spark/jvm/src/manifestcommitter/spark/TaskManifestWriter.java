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
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
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

  // Hadoop's DirEntry status codes (EntryStatus ordinals).
  static final int STATUS_NOT_FOUND = 1;
  static final int STATUS_FILE = 2;
  static final int STATUS_DIR = 3;

  private static final Logger LOG = LoggerFactory.getLogger(TaskManifestWriter.class);
  private static final ObjectMapper JSON = new ObjectMapper();

  /** The outcome of a scan: the manifest document plus the totals reported to the driver. */
  static final class Scan {
    final List<Map<String, Object>> files = new ArrayList<>();
    final List<Map<String, Object>> directories = new ArrayList<>();
    long bytes;
  }

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
   * <p>A recursive {@code listStatus} is used rather than {@code listFiles(dir, true)}: on the
   * local filesystem without Hadoop's native library the latter forks a process per entry.
   */
  Scan scan(Path workDir, Path dest, String absoluteSubdir, List<Path> absoluteDirs)
      throws IOException {
    long start = System.currentTimeMillis();
    boolean failed = true;
    try {
      FileSystem fs = workDir.getFileSystem(conf);
      FileSystem destFs = dest.getFileSystem(conf);
      Scan scan = new Scan();
      FileStatus[] top;
      try {
        stats.increment("op_list_status", 1);
        top = fs.listStatus(workDir);
      } catch (FileNotFoundException e) {
        // A task that wrote nothing may never have had its directory created by the store.
        top = new FileStatus[0];
      }
      for (FileStatus st : top) {
        String name = st.getPath().getName();
        if (st.isDirectory() && name.equals(absoluteSubdir)) {
          scanAbsolute(fs, st.getPath(), absoluteDirs, scan);
        } else {
          visit(fs, destFs, st, dest, 1, true, scan);
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

  private void visit(
      FileSystem fs, FileSystem destFs, FileStatus st, Path destParent, int depth,
      boolean parentMayExist, Scan scan) throws IOException {
    String name = st.getPath().getName();
    Path target = new Path(destParent, name);
    if (st.isDirectory()) {
      int status = parentMayExist ? probe(destFs, target) : STATUS_NOT_FOUND;
      scan.directories.add(dirEntry(target, status, depth));
      stats.increment("op_list_status", 1);
      for (FileStatus child : fs.listStatus(st.getPath())) {
        visit(fs, destFs, child, target, depth + 1, status != STATUS_NOT_FOUND, scan);
      }
    } else if (!isChecksumFile(name)) {
      scan.files.add(fileEntry(st, target));
      scan.bytes += st.getLen();
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
      if (index < 0 || index >= absoluteDirs.size()) {
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
          scan.files.add(fileEntry(f, new Path(absDir, f.getPath().getName())));
          scan.bytes += f.getLen();
        }
      }
    }
  }

  private int probe(FileSystem fs, Path dir) throws IOException {
    stats.increment("op_get_file_status", 1);
    try {
      return fs.getFileStatus(dir).isDirectory() ? STATUS_DIR : STATUS_FILE;
    } catch (FileNotFoundException e) {
      return STATUS_NOT_FOUND;
    }
  }

  static boolean isChecksumFile(String name) {
    return name.startsWith(".") && name.endsWith(".crc");
  }

  private static Map<String, Object> fileEntry(FileStatus st, Path target) {
    Map<String, Object> entry = new LinkedHashMap<>();
    entry.put("s", st.getPath().toUri().toString());
    entry.put("d", target.toUri().toString());
    entry.put("z", st.getLen());
    String identity = localIdentity(st);
    if (identity != null) {
      entry.put("e", identity);
    }
    return entry;
  }

  /**
   * The identity of a local file that a rename keeps: inode, modification time (ns) and size,
   * in the engine's format ({@code committer.store.local.file_etag}). With it, a job commit
   * resumed after a crash can prove that a renamed destination is this file. Other stores get
   * no "e" (the plain FileSystem API has no etag there; Hadoop omits the key when there is
   * none), and neither does a local file whose attributes cannot be read.
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

  private static Map<String, Object> dirEntry(Path dir, int status, int depth) {
    Map<String, Object> entry = new LinkedHashMap<>();
    entry.put("d", dir.toUri().toString());
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
    doc.put("taskAttemptDir", workDir.toUri().toString());
    doc.put("files", scan.files);
    doc.put("directories", scan.directories);
    doc.put("iostatistics", stats.snapshot());
    doc.put("extraData", extraData);
    return JSON.writeValueAsBytes(doc);
  }

  /**
   * Saves {@code bytes} to {@code tmp} and renames it to {@code dest}, retrying the whole
   * sequence (MAPREDUCE-7474: a store under load may fail the rename once). An existing
   * {@code dest} is deleted first: a later attempt of the same task wins (HADOOP-17258).
   */
  void save(byte[] bytes, Path tmp, Path dest) throws IOException {
    int attempts = Math.max(1, conf.getInt(SAVE_ATTEMPTS_KEY, SAVE_ATTEMPTS_DEFAULT));
    FileSystem fs = dest.getFileSystem(conf);
    IOException last = null;
    for (int attempt = 1; attempt <= attempts; attempt++) {
      long start = System.currentTimeMillis();
      try {
        try (FSDataOutputStream out = fs.create(tmp, true)) {
          out.write(bytes);
        }
        stats.increment("op_delete", 1);
        fs.delete(dest, false);
        stats.increment("op_rename", 1);
        if (!fs.rename(tmp, dest)) {
          throw new IOException("rename of " + tmp + " to " + dest + " returned false");
        }
        stats.timed("task_stage_save_manifest", System.currentTimeMillis() - start, false);
        return;
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

  private static void sleepBeforeRetry(int attempt) throws InterruptedIOException {
    try {
      Thread.sleep(Math.min(2000L, 100L << Math.min(attempt - 1, 5)));
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new InterruptedIOException("interrupted while retrying a task manifest save");
    }
  }
}
