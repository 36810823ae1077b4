//! The Flight service as served: Flight SQL (`QuiverFlightSql`, through arrow-flight's
//! `FlightSqlService` dispatch) plus what the InfluxDB 3 client libraries send besides Flight SQL
//! — a `DoGet` whose ticket is JSON, `{"database", "sql_query", "query_type", "params"}` — which
//! the Flight SQL dispatch would refuse as an undecodable protobuf.

use std::sync::Arc;

use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo, HandshakeRequest, PollInfo,
    SchemaResult, Ticket,
};
use quiver_query::QueryParams;
use quiver_service::QueryRequest;
use serde::Deserialize;
use tonic::{Request, Response, Status, Streaming};

use crate::{control_for, QuiverFlightSql, ResultTypes};

/// The Flight service of a Quiver server: Flight SQL, and InfluxDB 3's JSON tickets.
#[derive(Clone)]
pub struct QuiverFlightService {
    sql: Arc<QuiverFlightSql>,
}

impl QuiverFlightService {
    /// Serves `sql`'s Flight SQL service, and JSON tickets through it.
    pub fn new(sql: QuiverFlightSql) -> Self {
        QuiverFlightService { sql: Arc::new(sql) }
    }
}

/// InfluxDB 3's ticket: what `influxdb3-python`, `-go`, `-java` and the others put in `DoGet`.
#[derive(Debug, Deserialize)]
struct JsonTicket {
    database: String,
    sql_query: String,
    #[serde(default)]
    query_type: QueryLanguage,
    /// Values for `$name` placeholders (an object) or `$1`, `$2`, ... (an array).
    #[serde(default)]
    params: serde_json::Value,
}

/// The language of a JSON ticket's query.
#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum QueryLanguage {
    #[default]
    Sql,
    Influxql,
}

/// Whether `ticket` is JSON rather than a Flight SQL protobuf (which never starts with `{`:
/// an `Any`'s first byte is the tag of its `type_url`, 0x0a).
fn is_json(ticket: &[u8]) -> bool {
    ticket
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'{')
}

impl QuiverFlightService {
    /// Answers a JSON ticket: its statement runs through the result cache as a Flight SQL
    /// statement does, for the caller the request authenticates.
    async fn do_get_json(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<<QuiverFlightSql as FlightService>::DoGetStream>, Status> {
        let caller = self.sql.caller(&request)?;
        let ticket: JsonTicket = serde_json::from_slice(&request.get_ref().ticket)
            .map_err(|e| Status::invalid_argument(format!("invalid JSON ticket: {e}")))?;
        let params = QueryParams::from_json(ticket.params).map_err(Status::invalid_argument)?;
        let types = ResultTypes::of_influxdb3_client(request.metadata())?;
        let statement = QueryRequest {
            database: ticket.database,
            sql: ticket.sql_query,
            params,
            scope: caller.scope().clone(),
            control: control_for(&caller, request.metadata())?,
            ..QueryRequest::default()
        };
        match ticket.query_type {
            QueryLanguage::Sql => self.sql.answer(statement, None, types).await,
            QueryLanguage::Influxql => self.sql.answer_influxql(statement, types).await,
        }
    }
}

#[tonic::async_trait]
impl FlightService for QuiverFlightService {
    type HandshakeStream = <QuiverFlightSql as FlightService>::HandshakeStream;
    type ListFlightsStream = <QuiverFlightSql as FlightService>::ListFlightsStream;
    type DoGetStream = <QuiverFlightSql as FlightService>::DoGetStream;
    type DoPutStream = <QuiverFlightSql as FlightService>::DoPutStream;
    type DoExchangeStream = <QuiverFlightSql as FlightService>::DoExchangeStream;
    type DoActionStream = <QuiverFlightSql as FlightService>::DoActionStream;
    type ListActionsStream = <QuiverFlightSql as FlightService>::ListActionsStream;

    async fn handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        FlightService::handshake(&*self.sql, request).await
    }

    async fn list_flights(
        &self,
        request: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        FlightService::list_flights(&*self.sql, request).await
    }

    async fn get_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        FlightService::get_flight_info(&*self.sql, request).await
    }

    async fn poll_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        FlightService::poll_flight_info(&*self.sql, request).await
    }

    async fn get_schema(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        FlightService::get_schema(&*self.sql, request).await
    }

    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        if is_json(&request.get_ref().ticket) {
            return self.do_get_json(request).await;
        }
        FlightService::do_get(&*self.sql, request).await
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        FlightService::do_put(&*self.sql, request).await
    }

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        FlightService::do_exchange(&*self.sql, request).await
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        FlightService::do_action(&*self.sql, request).await
    }

    async fn list_actions(
        &self,
        request: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        FlightService::list_actions(&*self.sql, request).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_tickets_are_told_from_flight_sql_tickets() {
        assert!(is_json(br#"{"database":"db","sql_query":"SELECT 1"}"#));
        assert!(is_json(b"  \n{}"));
        assert!(!is_json(
            b"\x0a\x2ftype.googleapis.com/arrow.flight.protocol.sql"
        ));
        assert!(!is_json(b""));
    }

    #[test]
    fn json_tickets_parse_as_the_influxdb3_clients_send_them() {
        let ticket: JsonTicket = serde_json::from_slice(
            br#"{"database":"db","sql_query":"SELECT $a","query_type":"sql","params":{"a":1}}"#,
        )
        .unwrap();
        assert_eq!(ticket.query_type, QueryLanguage::Sql);
        assert!(matches!(
            QueryParams::from_json(ticket.params),
            Ok(QueryParams::Named(named)) if named.len() == 1
        ));
        let influxql: JsonTicket = serde_json::from_slice(
            br#"{"database":"db","sql_query":"SHOW MEASUREMENTS","query_type":"influxql"}"#,
        )
        .unwrap();
        assert_eq!(influxql.query_type, QueryLanguage::Influxql);
        assert!(
            serde_json::from_slice::<JsonTicket>(br#"{"database":"db","query_type":"sql"}"#)
                .is_err()
        );
        assert!(serde_json::from_slice::<JsonTicket>(
            br#"{"database":"db","sql_query":"x","query_type":"flux"}"#
        )
        .is_err());
    }
}
