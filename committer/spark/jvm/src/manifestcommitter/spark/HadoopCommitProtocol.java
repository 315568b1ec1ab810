package manifestcommitter.spark;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.OutputCommitter;
import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.hadoop.mapreduce.lib.output.FileOutputCommitter;
import org.apache.hadoop.mapreduce.lib.output.FileOutputFormat;
import org.apache.hadoop.mapreduce.lib.output.PathOutputCommitter;
import org.apache.hadoop.mapreduce.lib.output.PathOutputCommitterFactory;
import org.apache.spark.internal.io.FileNameSpec;
import org.apache.spark.sql.execution.datasources.SQLHadoopMapReduceCommitProtocol;
import scala.Option;

/**
 * Spark's own protocol, what {@link ManifestCommitProtocol} does for a destination the Python
 * engine does not open, with the committer {@code mapreduce.outputcommitter.factory.scheme.<s>}
 * names, else Hadoop's ManifestCommitter where this Hadoop has it (3.3.5+); else, and for a
 * dynamic partition overwrite (staged by Spark with a FileOutputCommitter only), Spark's usual
 * one. Unlike Spark's protocol, it is used even where a format names its own (Parquet), and task
 * files go to its work path.
 */
class HadoopCommitProtocol extends SQLHadoopMapReduceCommitProtocol {
  static final String FACTORY_KEY = "mapreduce.outputcommitter.factory.scheme.";
  static final String MANIFEST_FACTORY =
      "org.apache.hadoop.mapreduce.lib.output.committer.manifest.ManifestCommitterFactory";
  private static final long serialVersionUID = 1L;

  private final boolean dynamicPartitionOverwrite;
  /** The destination's scheme, set on the driver when Spark's protocol takes the job. */
  String scheme;
  private transient OutputCommitter committer;

  HadoopCommitProtocol(String jobId, String path, boolean dynamicOverwrite) {
    super(jobId, path, dynamicOverwrite);
    this.dynamicPartitionOverwrite = dynamicOverwrite;
  }

  /** The committer the factory key names for {@link #scheme}, or null for Spark's usual one. */
  String factory(Configuration conf) {
    String own = conf.get(FACTORY_KEY + scheme);
    if (own != null || dynamicPartitionOverwrite) {
      return dynamicPartitionOverwrite ? null : own;
    }
    try {
      Class.forName(MANIFEST_FACTORY, false, HadoopCommitProtocol.class.getClassLoader());
      return MANIFEST_FACTORY;
    } catch (ClassNotFoundException | LinkageError e) {
      return null;
    }
  }

  @Override
  public OutputCommitter setupCommitter(TaskAttemptContext context) {
    Configuration conf = context.getConfiguration();
    String factory = factory(conf);
    if (factory == null) {
      committer = super.setupCommitter(context);
    } else {
      conf.set(FACTORY_KEY + scheme, factory);
      Path out = FileOutputFormat.getOutputPath(context);
      committer = ManifestCommitProtocol.unchecked(factory + " for " + out,
          () -> PathOutputCommitterFactory.getCommitterFactory(out, conf)
              .createOutputCommitter(out, context));
    }
    return committer;
  }

  @Override
  public String newTaskTempFile(TaskAttemptContext ctx, Option<String> dir, FileNameSpec spec) {
    if (committer instanceof PathOutputCommitter && !(committer instanceof FileOutputCommitter)) {
      Path work = ManifestCommitProtocol.unchecked("no work path of " + committer,
          () -> ((PathOutputCommitter) committer).getWorkPath());
      Path base = dir.isDefined() ? new Path(work, dir.get()) : work;
      return new Path(base, getFilename(ctx, spec)).toString();
    }
    return super.newTaskTempFile(ctx, dir, spec);
  }
}
