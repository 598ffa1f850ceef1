"""quickstart: a Flower / PyTorch app."""

from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from quickstart.task import Net, load_data
from quickstart.task import test as test_fn
from quickstart.task import train as train_fn

# Flower ClientApp
app = ClientApp()


@app.train()
def train(msg: Message, context: Context):
    """Train the model on local data."""
    model = Net(context.run_config["embedding-rows"])
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    partition_id = context.node_config["partition-id"]
    num_partitions = context.node_config["num-partitions"]
    examples = context.run_config["examples-per-partition"]
    trainset, _ = load_data(partition_id, num_partitions, examples)
    train_loss = train_fn(
        model, trainset, context.run_config["local-epochs"], msg.content["config"]["lr"]
    )
    model_record = ArrayRecord(model.state_dict())
    metrics = {"train_loss": train_loss, "num-examples": len(trainset[1])}
    content = RecordDict({"arrays": model_record, "metrics": MetricRecord(metrics)})
    return Message(content=content, reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context):
    """Evaluate the model on local data."""
    model = Net(context.run_config["embedding-rows"])
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    _, testset = load_data(
        context.node_config["partition-id"], context.node_config["num-partitions"]
    )
    eval_loss, eval_acc = test_fn(model, testset)
    metrics = {"eval_loss": eval_loss, "eval_acc": eval_acc, "num-examples": len(testset[1])}
    return Message(content=RecordDict({"metrics": MetricRecord(metrics)}), reply_to=msg)
