package manifestcommitter.testfs;

import java.io.IOException;
import org.apache.hadoop.fs.EtagSource;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;

/**
 * Local disk whose file statuses offer an etag, as ABFS's do: {@code etagfs:<name>:<length>},
 * so a test can tell it from the local identity the shim computes itself. It says its renames
 * keep etags ({@code fs.capability.etags.preserved.in.rename}) unless {@link #PRESERVED} is
 * false. For tests only (tests/spark/test_task_etags.py installs it as {@code fs.file.impl}).
 */
public class EtagLocalFileSystem extends RawLocalFileSystem {
  public static final String PRESERVED = "test.etagfs.etags.preserved.in.rename";

  static final class EtagStatus extends FileStatus implements EtagSource {
    private static final long serialVersionUID = 1L;
    private final String etag;

    EtagStatus(FileStatus status, String etag) throws IOException {
      super(status);
      this.etag = etag;
    }

    @Override
    public String getEtag() {
      return etag;
    }
  }

  static FileStatus tagged(FileStatus st) throws IOException {
    if (st.isDirectory()) {
      return st;
    }
    return new EtagStatus(st, "etagfs:" + st.getPath().getName() + ":" + st.getLen());
  }

  @Override
  public FileStatus getFileStatus(Path f) throws IOException {
    return tagged(super.getFileStatus(f));
  }

  @Override
  public FileStatus[] listStatus(Path f) throws IOException {
    FileStatus[] found = super.listStatus(f);
    FileStatus[] out = new FileStatus[found.length];
    for (int i = 0; i < found.length; i++) {
      out[i] = tagged(found[i]);
    }
    return out;
  }

  @Override
  public boolean hasPathCapability(Path path, String capability) throws IOException {
    if ("fs.capability.etags.preserved.in.rename".equals(capability)
        || "fs.capability.etags.available".equals(capability)) {
      return getConf().getBoolean(PRESERVED, true);
    }
    return super.hasPathCapability(path, capability);
  }
}
