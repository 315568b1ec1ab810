package manifestcommitter.testhdfs;

import java.io.File;
import java.io.InputStream;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.MiniDFSCluster;

/**
 * A real HDFS for the Spark suite: one NameNode and one DataNode (Hadoop's MiniDFSCluster, from
 * hadoop-client-minicluster) on 127.0.0.1, ports picked by the kernel, storage under the
 * directory given. Prints {@code READY hdfs://127.0.0.1:<port>} once the cluster is up, then
 * serves until its standard input closes (the test process holds the other end, so it stops
 * with it however that ends), and shuts the cluster down.
 */
public final class MiniHdfs {
  private MiniHdfs() {}

  public static void main(String[] args) throws Exception {
    Configuration conf = new Configuration();
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, new File(args[0]).getAbsolutePath());
    conf.set("dfs.namenode.rpc-address", "127.0.0.1:0");
    conf.set("dfs.namenode.http-address", "127.0.0.1:0");
    conf.set("dfs.datanode.address", "127.0.0.1:0");
    conf.set("dfs.datanode.http.address", "127.0.0.1:0");
    conf.set("dfs.datanode.ipc.address", "127.0.0.1:0");
    conf.setBoolean("dfs.permissions.enabled", false);
    MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf)
        .numDataNodes(1)
        .nameNodePort(0)
        .build();
    try {
      cluster.waitActive();
      System.out.println("READY hdfs://127.0.0.1:" + cluster.getNameNodePort());
      System.out.flush();
      InputStream in = System.in;
      while (in.read() >= 0) {
        // nothing: wait for the end of the input
      }
    } finally {
      cluster.shutdown();
    }
  }
}
