package manifestcommitter.testfs;

import java.net.URI;
import org.apache.hadoop.fs.RawLocalFileSystem;

/**
 * Local disk under a scheme only the JVM knows, {@code jvmonly:///path}: a stand-in for HDFS,
 * S3A or any filesystem the Python engine cannot open. For tests only (the Spark suite's
 * session registers it as {@code fs.jvmonly.impl}).
 */
public class JvmOnlyFileSystem extends RawLocalFileSystem {
  public static final URI NAME = URI.create("jvmonly:///");

  @Override
  public URI getUri() {
    return NAME;
  }

  @Override
  public String getScheme() {
    return "jvmonly";
  }
}
