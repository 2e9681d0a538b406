/*
 * bench/bench_fold_floor.py's experiment: the event stream's per-key fold (bench_whole_runs'
 * EVENTS_SCHEMA) as ONE JVM aggregate through Spark's public Aggregator API, written by hand for
 * that one schema, to measure what the "one JVM aggregate per key" design could gain over the
 * compiled combine's built-in aggregates.  Not part of tidemark: no validation, no undeclared
 * properties, no errors; amount summed in cents.  Compiled by the bench at run time.
 */
package tidemark.bench;

import java.io.Serializable;
import java.util.*;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.expressions.Aggregator;
import org.apache.spark.sql.Encoder;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.types.*;

public final class EventsFold extends Aggregator<Row, EventsFold.Buf, Row> {
    public static final class Ord implements Serializable, Comparable<Ord> {
        String file; long block; long row;
        Ord(String f, long b, long r) { file = f; block = b; row = r; }
        public int compareTo(Ord o) {
            int c = file.compareTo(o.file);
            if (c != 0) return c;
            c = Long.compare(block, o.block);
            return c != 0 ? c : Long.compare(row, o.row);
        }
    }
    public static final class Buf implements Serializable {
        String et, status; long ets = Long.MIN_VALUE, etf; Ord eto;
        String fs; long fss = Long.MAX_VALUE, fsf; Ord fso;
        long cents; long amountCount; long n; long nCount;
        ArrayList<Object[]> tags = new ArrayList<>();
        String note; Ord noteO;
        HashMap<String, Object[]> address = new HashMap<>();
        long docs;
    }
    public Buf zero() { return new Buf(); }

    static boolean later(long s, long f, Ord o, long s2, long f2, Ord o2) { // (s,f,o) > (s2,f2,o2)
        if (s != s2) return s > s2;
        if (f != f2) return f > f2;
        return o2 == null || o.compareTo(o2) > 0;
    }

    public Buf reduce(Buf b, Row r) {
        Ord o = new Ord(r.getString(12), r.getLong(13), r.getLong(14));
        b.docs++;
        if (!r.isNullAt(0)) {
            long s = r.getLong(2), f = r.getLong(3);
            if (b.eto == null || later(s, f, o, b.ets, b.etf, b.eto)) { b.et = r.getString(0); b.status = r.getString(1); b.ets = s; b.etf = f; b.eto = o; }
        }
        if (!r.isNullAt(4)) {
            long s = r.getLong(5), f = r.getLong(6);
            if (b.fso == null || later(-s, -f, o, -b.fss, -b.fsf, b.fso)) { b.fs = r.getString(4); b.fss = s; b.fsf = f; b.fso = o; }
        }
        if (!r.isNullAt(7)) { b.cents += Math.round(r.getDouble(7) * 100); b.amountCount++; }
        if (!r.isNullAt(8)) { b.n += r.getLong(8); b.nCount++; }
        if (!r.isNullAt(9)) { b.tags.add(new Object[]{o, r.getList(9)}); }
        if (!r.isNullAt(10)) { if (b.noteO == null || o.compareTo(b.noteO) > 0) { b.note = r.getString(10); b.noteO = o; } }
        if (!r.isNullAt(11)) {
            scala.collection.Map<String, String> m = r.getMap(11);
            scala.collection.Iterator<scala.Tuple2<String, String>> it = m.iterator();
            while (it.hasNext()) {
                scala.Tuple2<String, String> e = it.next();
                Object[] cur = b.address.get(e._1());
                if (cur == null || o.compareTo((Ord) cur[0]) > 0) b.address.put(e._1(), new Object[]{o, e._2()});
            }
        }
        return b;
    }
    public Buf merge(Buf a, Buf b) {
        if (b.eto != null && (a.eto == null || later(b.ets, b.etf, b.eto, a.ets, a.etf, a.eto))) { a.et = b.et; a.status = b.status; a.ets = b.ets; a.etf = b.etf; a.eto = b.eto; }
        if (b.fso != null && (a.fso == null || later(-b.fss, -b.fsf, b.fso, -a.fss, -a.fsf, a.fso))) { a.fs = b.fs; a.fss = b.fss; a.fsf = b.fsf; a.fso = b.fso; }
        a.cents += b.cents; a.amountCount += b.amountCount; a.n += b.n; a.nCount += b.nCount;
        a.tags.addAll(b.tags);
        if (b.noteO != null && (a.noteO == null || b.noteO.compareTo(a.noteO) > 0)) { a.note = b.note; a.noteO = b.noteO; }
        for (Map.Entry<String, Object[]> e : b.address.entrySet()) {
            Object[] cur = a.address.get(e.getKey());
            if (cur == null || ((Ord) e.getValue()[0]).compareTo((Ord) cur[0]) > 0) a.address.put(e.getKey(), e.getValue());
        }
        a.docs += b.docs;
        return a;
    }
    @SuppressWarnings("unchecked")
    public Row finish(Buf b) {
        String[] tags = null;
        if (!b.tags.isEmpty()) {
            b.tags.sort((x, y) -> ((Ord) x[0]).compareTo((Ord) y[0]));
            LinkedHashSet<String> seen = new LinkedHashSet<>();
            for (Object[] t : b.tags) for (Object s : (List<Object>) t[1]) seen.add((String) s);
            tags = seen.toArray(new String[0]);
        }
        String addr = null;
        if (!b.address.isEmpty()) {
            StringBuilder sb = new StringBuilder("{");
            for (Map.Entry<String, Object[]> e : new TreeMap<>(b.address).entrySet()) {
                if (sb.length() > 1) sb.append(',');
                sb.append('"').append(e.getKey()).append("\":\"").append((String) e.getValue()[1]).append('"');
            }
            addr = sb.append('}').toString();
        }
        return RowFactory.create(b.et, b.status, b.fs, b.amountCount > 0 ? b.cents / 100.0 : null, b.nCount > 0 ? b.n : null,
            tags, b.note, addr, b.docs);
    }
    public static final StructType OUT = new StructType()
        .add("event_time", DataTypes.StringType).add("status", DataTypes.StringType).add("first_seen", DataTypes.StringType)
        .add("amount", DataTypes.DoubleType).add("n", DataTypes.LongType)
        .add("tags", DataTypes.createArrayType(DataTypes.StringType)).add("note", DataTypes.StringType)
        .add("address", DataTypes.StringType).add("docs", DataTypes.LongType);
    public Encoder<Buf> bufferEncoder() { return Encoders.kryo(Buf.class); }
    public Encoder<Row> outputEncoder() { return Encoders.row(OUT); }

    public static void register(org.apache.spark.sql.SparkSession spark, StructType input) {
        spark.udf().register("events_fold", org.apache.spark.sql.functions.udaf(new EventsFold(), Encoders.row(input)));
    }
}
