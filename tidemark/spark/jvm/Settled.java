package tidemark.jvm;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.classic.Dataset;
import org.apache.spark.sql.execution.LogicalRDD;
import org.apache.spark.sql.execution.LogicalRDD$;
import org.apache.spark.sql.execution.QueryExecution;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.adaptive.AdaptiveSparkPlanExec;
import org.apache.spark.sql.execution.adaptive.QueryStageExec;
import org.apache.spark.sql.execution.exchange.ShuffleExchangeExec;
import org.apache.spark.util.ThreadUtils;
import scala.collection.Iterator;
import scala.concurrent.duration.Duration;

/**
 * {@code tidemark.spark.internals.settle} in one call (its Python form costs a py4j round trip
 * per plan node): the map side of a Dataset's shuffles run once, the rest of it as a
 * {@code LogicalRDD} over their output, and the records they wrote.
 */
public final class Settled {
    private Settled() {}

    /** {@code [LogicalRDD leaf, Long records]}. */
    public static Object[] settle(Dataset<?> ds) throws Exception {
        QueryExecution qe = ds.queryExecution();
        SparkPlan plan = qe.executedPlan();
        boolean adaptive = plan instanceof AdaptiveSparkPlanExec;
        if (!adaptive) { // adaptive execution runs the map stages when the RDD is made; without it, here
            for (ShuffleExchangeExec ex : exchanges(plan)) {
                ThreadUtils.awaitResult(ex.mapOutputStatisticsFuture(), Duration.Inf());
            }
        }
        RDD<InternalRow> rdd = qe.toRdd();
        long records = 0;
        for (ShuffleExchangeExec ex : exchanges(adaptive ? ((AdaptiveSparkPlanExec) plan).executedPlan() : plan)) {
            records += ex.metrics().apply("shuffleRecordsWritten").value();
        }
        LogicalRDD leaf = LogicalRDD$.MODULE$.fromDataset(rdd, ds, false, false);
        return new Object[] {leaf, records};
    }

    /** The shuffle exchanges of a physical plan nearest its root (adaptive query stages opened). */
    static List<ShuffleExchangeExec> exchanges(SparkPlan plan) {
        List<ShuffleExchangeExec> out = new ArrayList<>();
        List<SparkPlan> todo = new ArrayList<>();
        todo.add(plan);
        while (!todo.isEmpty()) {
            SparkPlan node = todo.remove(todo.size() - 1);
            if (node instanceof ShuffleExchangeExec) {
                out.add((ShuffleExchangeExec) node);
            } else if (node instanceof QueryStageExec) {
                todo.add(((QueryStageExec) node).plan());
            } else if (node instanceof AdaptiveSparkPlanExec) {
                todo.add(((AdaptiveSparkPlanExec) node).executedPlan());
            } else {
                Iterator<SparkPlan> it = node.children().iterator();
                while (it.hasNext()) {
                    todo.add(it.next());
                }
            }
        }
        return out;
    }
}
