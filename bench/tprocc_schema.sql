-- TPROC-C schema for bench/tprocc.py: the nine TPC-C tables with the column
-- names, keys and secondary indexes of HammerDB's PostgreSQL layout, and the
-- five transactions as PL/pgSQL functions (neword, payment, delivery, slev,
-- ostat) that a virtual user calls one per autocommit statement.
--
-- Not for: loading data (tprocc.py generates rows and COPYs them) or the
-- transaction mix and keying (tprocc.py picks the inputs).
--
-- tprocc.py runs the three parts separately, in this order: "tables" before
-- the load, "indexes" after it (building them once is faster than keeping
-- them up to date row by row), then "functions".  A part starts at a line
-- `-- @part NAME`.

-- @part tables
CREATE TABLE warehouse (
    w_id integer NOT NULL, w_ytd numeric(12, 2), w_tax numeric(4, 4),
    w_name varchar(10), w_street_1 varchar(20), w_street_2 varchar(20),
    w_city varchar(20), w_state char(2), w_zip char(9));
CREATE TABLE district (
    d_id smallint NOT NULL, d_w_id integer NOT NULL, d_ytd numeric(12, 2),
    d_tax numeric(4, 4), d_next_o_id integer, d_name varchar(10),
    d_street_1 varchar(20), d_street_2 varchar(20), d_city varchar(20),
    d_state char(2), d_zip char(9));
CREATE TABLE customer (
    c_id integer NOT NULL, c_d_id smallint NOT NULL, c_w_id integer NOT NULL,
    c_first varchar(16), c_middle char(2), c_last varchar(16),
    c_street_1 varchar(20), c_street_2 varchar(20), c_city varchar(20),
    c_state char(2), c_zip char(9), c_phone char(16), c_since timestamp,
    c_credit char(2), c_credit_lim numeric(12, 2), c_discount numeric(4, 4),
    c_balance numeric(12, 2), c_ytd_payment numeric(12, 2),
    c_payment_cnt integer, c_delivery_cnt integer, c_data varchar(500));
CREATE TABLE history (
    h_c_id integer, h_c_d_id smallint, h_c_w_id integer, h_d_id smallint,
    h_w_id integer, h_date timestamp, h_amount numeric(6, 2), h_data varchar(24));
CREATE TABLE new_order (
    no_w_id integer NOT NULL, no_d_id smallint NOT NULL, no_o_id integer NOT NULL);
CREATE TABLE orders (
    o_id integer NOT NULL, o_w_id integer NOT NULL, o_d_id smallint NOT NULL,
    o_c_id integer, o_carrier_id smallint, o_ol_cnt smallint,
    o_all_local smallint, o_entry_d timestamp);
CREATE TABLE order_line (
    ol_w_id integer NOT NULL, ol_d_id smallint NOT NULL, ol_o_id integer NOT NULL,
    ol_number smallint NOT NULL, ol_i_id integer, ol_delivery_d timestamp,
    ol_amount numeric(6, 2), ol_supply_w_id integer, ol_quantity smallint,
    ol_dist_info char(24));
CREATE TABLE item (
    i_id integer NOT NULL, i_im_id integer, i_name varchar(24),
    i_price numeric(5, 2), i_data varchar(50));
CREATE TABLE stock (
    s_i_id integer NOT NULL, s_w_id integer NOT NULL, s_quantity smallint,
    s_dist_01 char(24), s_dist_02 char(24), s_dist_03 char(24), s_dist_04 char(24),
    s_dist_05 char(24), s_dist_06 char(24), s_dist_07 char(24), s_dist_08 char(24),
    s_dist_09 char(24), s_dist_10 char(24), s_data varchar(50),
    s_ytd integer, s_order_cnt smallint, s_remote_cnt smallint);

-- @part indexes
ALTER TABLE warehouse ADD CONSTRAINT warehouse_i1 PRIMARY KEY (w_id);
ALTER TABLE district ADD CONSTRAINT district_i1 PRIMARY KEY (d_w_id, d_id);
ALTER TABLE customer ADD CONSTRAINT customer_i1 PRIMARY KEY (c_w_id, c_d_id, c_id);
CREATE UNIQUE INDEX customer_i2 ON customer (c_w_id, c_d_id, c_last, c_first, c_id);
ALTER TABLE new_order ADD CONSTRAINT new_order_i1 PRIMARY KEY (no_w_id, no_d_id, no_o_id);
ALTER TABLE orders ADD CONSTRAINT orders_i1 PRIMARY KEY (o_w_id, o_d_id, o_id);
CREATE UNIQUE INDEX orders_i2 ON orders (o_w_id, o_d_id, o_c_id, o_id);
ALTER TABLE order_line ADD CONSTRAINT order_line_i1
    PRIMARY KEY (ol_w_id, ol_d_id, ol_o_id, ol_number);
ALTER TABLE item ADD CONSTRAINT item_i1 PRIMARY KEY (i_id);
ALTER TABLE stock ADD CONSTRAINT stock_i1 PRIMARY KEY (s_w_id, s_i_id);

-- @part functions

-- Looks up a customer of district (w, d) by last name: the one at position
-- ceil(n / 2) in c_first order (TPC-C 2.5.2.2 / 2.6.2.2).  Raises when no
-- customer has that name.
CREATE OR REPLACE FUNCTION tpcc_customer_by_name(p_w_id integer, p_d_id integer,
                                                 p_c_last text)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    n integer;
    found_id integer;
BEGIN
    SELECT count(*) INTO n FROM customer
     WHERE c_w_id = p_w_id AND c_d_id = p_d_id AND c_last = p_c_last;
    IF n = 0 THEN
        RAISE EXCEPTION 'no customer named % in warehouse % district %',
            p_c_last, p_w_id, p_d_id;
    END IF;
    SELECT c_id INTO found_id FROM customer
     WHERE c_w_id = p_w_id AND c_d_id = p_d_id AND c_last = p_c_last
     ORDER BY c_first OFFSET (n + 1) / 2 - 1 LIMIT 1;
    RETURN found_id;
END $$;

-- New-Order (TPC-C 2.4): the item arrays are the order lines.  Returns the
-- new order's o_id.  An item id with no item row raises 'Item number is not
-- valid' after the district, orders and new_order changes, so the whole
-- transaction rolls back (the 1% of the spec).
CREATE OR REPLACE FUNCTION neword(p_w_id integer, p_d_id integer, p_c_id integer,
                                  p_i_ids integer[], p_supply_w_ids integer[],
                                  p_quantities integer[])
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_discount numeric; v_last text; v_credit text; v_w_tax numeric; v_d_tax numeric;
    v_o_id integer; v_ol_cnt integer; v_all_local integer; v_total numeric := 0;
    v_price numeric; v_name text; v_i_data text; v_dist text; v_s_data text;
    v_amount numeric; i integer;
BEGIN
    v_ol_cnt := array_length(p_i_ids, 1);
    SELECT c_discount, c_last, c_credit, w_tax
      INTO v_discount, v_last, v_credit, v_w_tax
      FROM customer, warehouse
     WHERE w_id = p_w_id AND c_w_id = w_id AND c_d_id = p_d_id AND c_id = p_c_id;
    UPDATE district SET d_next_o_id = d_next_o_id + 1
     WHERE d_w_id = p_w_id AND d_id = p_d_id
     RETURNING d_next_o_id - 1, d_tax INTO v_o_id, v_d_tax;
    v_all_local := CASE WHEN p_supply_w_ids <@ ARRAY[p_w_id] THEN 1 ELSE 0 END;
    INSERT INTO orders (o_id, o_d_id, o_w_id, o_c_id, o_entry_d, o_carrier_id,
                        o_ol_cnt, o_all_local)
    VALUES (v_o_id, p_d_id, p_w_id, p_c_id, now(), NULL, v_ol_cnt, v_all_local);
    INSERT INTO new_order (no_o_id, no_d_id, no_w_id) VALUES (v_o_id, p_d_id, p_w_id);
    FOR i IN 1 .. v_ol_cnt LOOP
        SELECT i_price, i_name, i_data INTO v_price, v_name, v_i_data
          FROM item WHERE i_id = p_i_ids[i];
        IF NOT FOUND THEN
            RAISE EXCEPTION 'Item number is not valid';
        END IF;
        UPDATE stock
           SET s_quantity = CASE WHEN s_quantity - p_quantities[i] >= 10
                                 THEN s_quantity - p_quantities[i]
                                 ELSE s_quantity - p_quantities[i] + 91 END,
               s_ytd = s_ytd + p_quantities[i],
               s_order_cnt = s_order_cnt + 1,
               s_remote_cnt = s_remote_cnt
                              + CASE WHEN p_supply_w_ids[i] <> p_w_id THEN 1 ELSE 0 END
         WHERE s_i_id = p_i_ids[i] AND s_w_id = p_supply_w_ids[i]
         RETURNING CASE p_d_id WHEN 1 THEN s_dist_01 WHEN 2 THEN s_dist_02
                               WHEN 3 THEN s_dist_03 WHEN 4 THEN s_dist_04
                               WHEN 5 THEN s_dist_05 WHEN 6 THEN s_dist_06
                               WHEN 7 THEN s_dist_07 WHEN 8 THEN s_dist_08
                               WHEN 9 THEN s_dist_09 ELSE s_dist_10 END,
                   s_data
          INTO v_dist, v_s_data;
        v_amount := p_quantities[i] * v_price;
        v_total := v_total + v_amount;
        INSERT INTO order_line (ol_o_id, ol_d_id, ol_w_id, ol_number, ol_i_id,
                                ol_supply_w_id, ol_quantity, ol_amount, ol_dist_info,
                                ol_delivery_d)
        VALUES (v_o_id, p_d_id, p_w_id, i, p_i_ids[i], p_supply_w_ids[i],
                p_quantities[i], v_amount, v_dist, NULL);
    END LOOP;
    v_total := v_total * (1 - v_discount) * (1 + v_w_tax + v_d_tax);
    RETURN v_o_id;
END $$;

-- Payment (TPC-C 2.5): by customer id, or by last name when p_c_last is not
-- NULL.  Returns the customer's c_id.  Locks warehouse, district, customer in
-- that order (as every other function that locks more than one of them).
CREATE OR REPLACE FUNCTION payment(p_w_id integer, p_d_id integer, p_c_w_id integer,
                                   p_c_d_id integer, p_c_id integer, p_c_last text,
                                   p_amount numeric)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_w_name text; v_d_name text; v_c_id integer; v_credit text;
BEGIN
    UPDATE warehouse SET w_ytd = w_ytd + p_amount WHERE w_id = p_w_id
    RETURNING w_name INTO v_w_name;
    UPDATE district SET d_ytd = d_ytd + p_amount WHERE d_w_id = p_w_id AND d_id = p_d_id
    RETURNING d_name INTO v_d_name;
    v_c_id := p_c_id;
    IF p_c_last IS NOT NULL THEN
        v_c_id := tpcc_customer_by_name(p_c_w_id, p_c_d_id, p_c_last);
    END IF;
    SELECT c_credit INTO v_credit FROM customer
     WHERE c_w_id = p_c_w_id AND c_d_id = p_c_d_id AND c_id = v_c_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'customer % % % not found', p_c_w_id, p_c_d_id, v_c_id;
    END IF;
    UPDATE customer
       SET c_balance = c_balance - p_amount,
           c_ytd_payment = c_ytd_payment + p_amount,
           c_payment_cnt = c_payment_cnt + 1,
           c_data = CASE WHEN v_credit = 'BC'
                         THEN left(format('%s %s %s %s %s %s | ', v_c_id, p_c_d_id,
                                          p_c_w_id, p_d_id, p_w_id, p_amount) || c_data, 500)
                         ELSE c_data END
     WHERE c_w_id = p_c_w_id AND c_d_id = p_c_d_id AND c_id = v_c_id;
    INSERT INTO history (h_c_d_id, h_c_w_id, h_c_id, h_d_id, h_w_id, h_date,
                         h_amount, h_data)
    VALUES (p_c_d_id, p_c_w_id, v_c_id, p_d_id, p_w_id, now(), p_amount,
            left(v_w_name || '    ' || v_d_name, 24));
    RETURN v_c_id;
END $$;

-- Delivery (TPC-C 2.7), run in the foreground as HammerDB does: for each of
-- the ten districts, the oldest undelivered order.  A district whose oldest
-- new_order row another delivery took meanwhile is skipped.  Returns the
-- number of orders delivered.
CREATE OR REPLACE FUNCTION delivery(p_w_id integer, p_carrier_id integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    d integer; v_o_id integer; v_c_id integer; v_sum numeric; delivered integer := 0;
BEGIN
    FOR d IN 1 .. 10 LOOP
        SELECT no_o_id INTO v_o_id FROM new_order
         WHERE no_w_id = p_w_id AND no_d_id = d
         ORDER BY no_o_id LIMIT 1 FOR UPDATE;
        CONTINUE WHEN NOT FOUND;
        DELETE FROM new_order WHERE no_w_id = p_w_id AND no_d_id = d AND no_o_id = v_o_id;
        UPDATE orders SET o_carrier_id = p_carrier_id
         WHERE o_w_id = p_w_id AND o_d_id = d AND o_id = v_o_id
         RETURNING o_c_id INTO v_c_id;
        UPDATE order_line SET ol_delivery_d = now()
         WHERE ol_w_id = p_w_id AND ol_d_id = d AND ol_o_id = v_o_id;
        SELECT sum(ol_amount) INTO v_sum FROM order_line
         WHERE ol_w_id = p_w_id AND ol_d_id = d AND ol_o_id = v_o_id;
        UPDATE customer SET c_balance = c_balance + coalesce(v_sum, 0),
                            c_delivery_cnt = c_delivery_cnt + 1
         WHERE c_w_id = p_w_id AND c_d_id = d AND c_id = v_c_id;
        delivered := delivered + 1;
    END LOOP;
    RETURN delivered;
END $$;

-- Stock-Level (TPC-C 2.8): distinct items of the district's last 20 orders
-- whose stock is below the threshold.
CREATE OR REPLACE FUNCTION slev(p_w_id integer, p_d_id integer, p_threshold integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_next integer; v_count integer;
BEGIN
    SELECT d_next_o_id INTO v_next FROM district WHERE d_w_id = p_w_id AND d_id = p_d_id;
    SELECT count(DISTINCT s_i_id) INTO v_count FROM order_line, stock
     WHERE ol_w_id = p_w_id AND ol_d_id = p_d_id
       AND ol_o_id >= v_next - 20 AND ol_o_id < v_next
       AND s_w_id = p_w_id AND s_i_id = ol_i_id AND s_quantity < p_threshold;
    RETURN v_count;
END $$;

-- Order-Status (TPC-C 2.6): the customer's balance and newest order with its
-- lines.  Returns the number of order lines of that order.
CREATE OR REPLACE FUNCTION ostat(p_w_id integer, p_d_id integer, p_c_id integer,
                                 p_c_last text)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_c_id integer; v_balance numeric; v_o_id integer; v_lines integer;
BEGIN
    v_c_id := p_c_id;
    IF p_c_last IS NOT NULL THEN
        v_c_id := tpcc_customer_by_name(p_w_id, p_d_id, p_c_last);
    END IF;
    SELECT c_balance INTO v_balance FROM customer
     WHERE c_w_id = p_w_id AND c_d_id = p_d_id AND c_id = v_c_id;
    SELECT o_id INTO v_o_id FROM orders
     WHERE o_w_id = p_w_id AND o_d_id = p_d_id AND o_c_id = v_c_id
     ORDER BY o_id DESC LIMIT 1;
    SELECT count(*) INTO v_lines FROM (
        SELECT ol_i_id, ol_supply_w_id, ol_quantity, ol_amount, ol_delivery_d
          FROM order_line
         WHERE ol_w_id = p_w_id AND ol_d_id = p_d_id AND ol_o_id = v_o_id) lines;
    RETURN v_lines;
END $$;
