package manifestcommitter.testfs;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;

/**
 * Local disk whose listings a test steers: a listing of a directory named {@link #FAIL} fails;
 * listings of directories whose names start with {@link #MEET} each wait until
 * {@link #MEET_COUNT} of them are in progress at once (up to a minute, then fail: listings
 * made one after another never meet). For tests only (tests/spark/test_task_scan.py installs
 * it as {@code fs.file.impl}, uncached, in a task attempt's configuration).
 */
public class ListingHooksFileSystem extends RawLocalFileSystem {
  public static final String FAIL = "test.listing.fail";
  public static final String MEET = "test.listing.meet.prefix";
  public static final String MEET_COUNT = "test.listing.meet.count";
  private static final ConcurrentHashMap<String, CountDownLatch> MEETINGS =
      new ConcurrentHashMap<>();

  @Override
  public FileStatus[] listStatus(Path f) throws IOException {
    String name = f.getName();
    if (name.equals(getConf().get(FAIL))) {
      throw new IOException("injected listing failure: " + f);
    }
    String prefix = getConf().get(MEET);
    if (prefix != null && name.startsWith(prefix)) {
      int count = getConf().getInt(MEET_COUNT, 2);
      CountDownLatch meeting = MEETINGS.computeIfAbsent(prefix, k -> new CountDownLatch(count));
      meeting.countDown();
      try {
        if (!meeting.await(60, TimeUnit.SECONDS)) {
          throw new IOException("listing " + f + " met no other listing in progress");
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new InterruptedIOException("interrupted: " + f);
      }
    }
    return super.listStatus(f);
  }
}
